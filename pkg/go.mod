module github.com/novaflow/nova/pkg

go 1.26.0

replace github.com/novaflow/nova/proto => ../proto
