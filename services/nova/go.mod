module github.com/novaflow/nova/services/nova

go 1.26.0

replace (
	github.com/novaflow/nova/pkg => ../../pkg
	github.com/novaflow/nova/pkg/devstack => ../../pkg/devstack
	github.com/novaflow/nova/proto => ../../proto
)
