package main

import (
	"os"
	"testing"
)

// TestMain removes what tests built for the whole run (procsBuild).
func TestMain(m *testing.M) {
	code := m.Run()
	if procsBinaries.dir != "" {
		_ = os.RemoveAll(procsBinaries.dir)
	}
	os.Exit(code)
}
