package service

import (
	"context"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// SetAfterKeep runs f between keeping a result and publishing it, until
// the test ends.
func SetAfterKeep(f func(context.Context, *novav1.ExecuteCode)) (reset func()) {
	afterKeep = f
	return func() { afterKeep = nil }
}
