module example.com/fake/pkg

go 1.26.0
