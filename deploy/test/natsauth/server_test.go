// Package natsauth checks deploy/nats: an embedded nats-server loaded with
// nats.conf and accounts.conf, each NOVA service connected as its own user,
// doing its real work (allowed) and trying what it must not (refused); and
// that deploy/compose.yaml and deploy/otel use that configuration as meant.
package natsauth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/novaflow/nova/pkg/bus"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats-server keeps process-wide helpers alive after Shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*diskIO).loop"),
	)
}

// configFile is the server configuration under test.
const configFile = "../../nats/nats.conf"

// Users of the NOVA account, as named in accounts.conf.
const (
	userGraphEngine     = bus.AgentGraphEngine
	userSandbox         = bus.AgentSandbox
	userAudit           = "audit"
	userInputAnalyzer   = bus.AgentInputAnalyzer
	userCodeGenerator   = bus.AgentCodeGenerator
	userCodeValidator   = bus.AgentCodeValidator
	userOutputValidator = bus.AgentOutputValidator
	userProducer        = "nova"
	userGateway         = "gateway"
	userAdmin           = "admin"
)

var allUsers = []string{userGraphEngine, userSandbox, userAudit, userInputAnalyzer, userCodeGenerator,
	userCodeValidator, userOutputValidator, userProducer, userGateway, userAdmin, "sys"}

// password is the test password of a user; passwordEnv is the variable
// accounts.conf reads it from (NOVA_<USER>_PASSWORD).
func password(user string) string { return "test-password-of-" + user }

func passwordEnv(user string) string {
	return "NOVA_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD"
}

// inboxPrefix is the inbox prefix a service must use (NATS_INBOX_PREFIX).
func inboxPrefix(user string) string { return "_INBOX." + user }

// natsServer is deploy/nats/nats.conf running in-process on loopback, with
// its store in a temporary directory.
type natsServer struct {
	srv  *server.Server
	opts *server.Options
}

// loadConfig parses nats.conf (and accounts.conf through its include) with
// the test passwords in the environment, as the server process would.
func loadConfig(t *testing.T) *server.Options {
	t.Helper()
	for _, u := range allUsers {
		t.Setenv(passwordEnv(u), password(u))
	}
	opts, err := serverOptions(t)
	if err != nil {
		t.Fatalf("load %s: %v", configFile, err)
	}
	return opts
}

// serverOptions parses nats.conf with the passwords already in the environment.
func serverOptions(t *testing.T) (*server.Options, error) {
	t.Helper()
	path, err := filepath.Abs(configFile)
	if err != nil {
		return nil, err
	}
	return server.ProcessConfigFile(path)
}

func startServer(t *testing.T) *natsServer { return startWith(t, loadConfig(t)) }

// startWith runs the server on loopback with random ports and its store in
// a temporary directory; everything else is as configured.
func startWith(t *testing.T, opts *server.Options) *natsServer {
	t.Helper()
	opts.StoreDir = t.TempDir()
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "127.0.0.1", server.RANDOM_PORT
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	if !srv.JetStreamEnabled() {
		t.Fatal("JetStream is not enabled")
	}
	return &natsServer{srv: srv, opts: opts}
}

func (s *natsServer) url() string { return s.srv.ClientURL() }

// monitoringEndpoint is host:port of the HTTP monitoring endpoint (KEDA's
// natsServerMonitoringEndpoint).
func (s *natsServer) monitoringEndpoint() string { return s.srv.MonitorAddr().String() }

// violations records the permission violations the server reports to one
// connection.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		v.mu.Lock()
		v.errs = append(v.errs, err.Error())
		v.mu.Unlock()
	}
}

func (v *violations) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

// clientOptions log in as user with that user's inbox prefix and record
// permission violations.
func clientOptions(user string, v *violations) []nats.Option {
	return []nats.Option{
		nats.UserInfo(user, password(user)),
		nats.CustomInboxPrefix(inboxPrefix(user)),
		nats.ErrorHandler(v.handler),
	}
}

// connectBus connects as user the way the service does (pkg/bus), with the
// replicas of the single test server.
func (s *natsServer) connectBus(t *testing.T, ctx context.Context, user string, opts ...bus.Option) (*bus.Bus, *violations) {
	t.Helper()
	v := &violations{}
	b, err := bus.Connect(ctx, s.url(), append([]bus.Option{
		bus.WithName(user),
		bus.WithNATSOptions(clientOptions(user, v)...),
	}, opts...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(b.Close)
	return b, v
}

// TestConfigIsProduction checks the settings docs/operations/nats-security.md promises of
// deploy/nats: JetStream fsyncs every write, the NOVA account has
// JetStream, SYS is the system account, and there is no anonymous access.
func TestConfigIsProduction(t *testing.T) {
	opts := loadConfig(t)
	if !opts.JetStream {
		t.Error("JetStream is off")
	}
	if !opts.SyncAlways {
		t.Error("jetstream.sync_interval is not 'always': acknowledged writes could be lost on a power failure")
	}
	if opts.MaxPayload != 1<<20 {
		t.Errorf("max_payload = %d, want 1MB", opts.MaxPayload)
	}
	if opts.SystemAccount != "SYS" {
		t.Errorf("system_account = %q, want SYS", opts.SystemAccount)
	}
	if opts.NoAuthUser != "" {
		t.Errorf("no_auth_user = %q: connections without credentials must be refused", opts.NoAuthUser)
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	for _, name := range allUsers {
		u, ok := users[name]
		if !ok {
			t.Errorf("user %q is missing", name)
			continue
		}
		want := "NOVA"
		if name == "sys" {
			want = "SYS"
		}
		if u.Account == nil || u.Account.Name != want {
			t.Errorf("user %q is not in account %s", name, want)
		}
		if u.Password != password(name) {
			t.Errorf("user %q: password is not read from %s", name, passwordEnv(name))
		}
		// Every user but the operators' is confined.
		if name != userAdmin && name != "sys" && u.Permissions == nil {
			t.Errorf("user %q has no permissions: it could do anything in the account", name)
		}
	}
	if len(users) != len(allUsers) {
		t.Errorf("accounts.conf has %d users, the test knows %d: add the new user's checks here", len(users), len(allUsers))
	}
}

func TestConnectionsWithoutValidCredentialsAreRefused(t *testing.T) {
	s := startServer(t)
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"anonymous", nil},
		{"wrong password", []nats.Option{nats.UserInfo(userSandbox, "guess")}},
		{"unknown user", []nats.Option{nats.UserInfo("mallory", "x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(s.url(), append(tc.opts, nats.NoReconnect())...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
				t.Fatalf("error = %v, want an authorization violation", err)
			}
		})
	}
}

// bwrapAvailable reports whether the sandbox can run here.
func bwrapAvailable() bool {
	_, err := os.Stat("/usr/bin/bwrap")
	return err == nil
}
