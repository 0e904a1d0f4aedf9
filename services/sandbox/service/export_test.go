package service

import (
	"context"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// SetRefusePublish runs f before each publish of a run's result, until the
// test ends; an error f returns fails the publish.
func SetRefusePublish(f func(context.Context, *novav1.ExecuteCode) error) (reset func()) {
	refusePublish = f
	return func() { refusePublish = nil }
}
