module github.com/novaflow/nova/pkg/devstack

go 1.26.0

replace (
	github.com/novaflow/nova/pkg => ../
	github.com/novaflow/nova/proto => ../../proto
)
