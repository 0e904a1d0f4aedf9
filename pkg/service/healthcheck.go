package service

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/novaflow/nova/pkg/config"
)

// HealthcheckArg, as a service's only argument, makes it ask its own
// /healthz (on HEALTH_ADDR, as a container's HEALTHCHECK runs it beside
// the service) and exit 0 when it answers 200, 1 otherwise: the images
// carry no curl or wget.
const HealthcheckArg = "healthcheck"

// healthcheck asks /healthz on addr (HEALTH_ADDR's form, ":8080" or
// "host:port"; an empty or unspecified host is the loopback) within
// timeout.
func healthcheck(addr string, timeout time.Duration) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("HEALTH_ADDR %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", req.URL, resp.Status)
	}
	return nil
}

// runHealthcheck is Main for HealthcheckArg: HEALTH_ADDR as the service
// reads it (Common).
func runHealthcheck(name string) int {
	var c Common
	if err := config.Load(&c, nil); err != nil {
		fmt.Fprintf(os.Stderr, "%s healthcheck: configuration: %v\n", name, err)
		return 1
	}
	if err := healthcheck(c.HealthAddr, 3*time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "%s healthcheck: %v\n", name, err)
		return 1
	}
	return 0
}
