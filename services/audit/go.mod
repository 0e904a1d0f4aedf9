module github.com/novaflow/nova/services/audit

go 1.26.0

replace (
	github.com/novaflow/nova/pkg => ../../pkg
	github.com/novaflow/nova/pkg/devstack => ../../pkg/devstack
	github.com/novaflow/nova/proto => ../../proto
)

require (
	github.com/cloudevents/sdk-go/v2 v2.16.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	go.mongodb.org/mongo-driver/v2 v2.9.3 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

require (
	github.com/novaflow/nova/pkg v0.0.0
	github.com/novaflow/nova/pkg/devstack v0.0.0
	github.com/novaflow/nova/proto v0.0.0
	go.uber.org/goleak v1.3.0
)
