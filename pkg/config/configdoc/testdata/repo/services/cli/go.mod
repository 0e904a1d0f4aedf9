module "example.com/fake/services/cli"

go 1.26.0
