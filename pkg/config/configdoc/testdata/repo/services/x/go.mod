module example.com/fake/services/x

go 1.26.0
