package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/deploy/test/internal/kedascaler"
	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TestKEDAReadsLagFromTheBundledCluster runs the bundled NATS as the chart
// renders it: three nats-servers with the rendered nats.conf and accounts,
// named as the StatefulSet's pods, each on its own loopback address as a
// pod on its own IP, clustered through the config's route URLs, which name
// the pods under the headless service. Names resolve as the cluster's DNS
// resolves them (clusterDNS). KEDA's walk (internal/kedascaler) then polls
// the code-generator's rendered trigger while its consumer holds a backlog
// nobody consumes, starting from a server that does not lead the consumer.
//
// With the client Service as endpoint, KEDA asks for <leader>.<client
// Service>, a name Kubernetes never creates: the first poll fails, and so
// does the first after every leader change. With the headless service the
// rendered trigger names, every poll reads the real backlog from the
// leader, also after the leader moves.
func TestKEDAReadsLagFromTheBundledCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := render(t, nil)
	so := r.scaledObjects[fullname(bus.AgentCodeGenerator)]
	if so == nil {
		t.Fatalf("no ScaledObject for %s", bus.AgentCodeGenerator)
	}
	trigger := so.Spec.Triggers[0].Metadata
	const backlog = 12

	dns := newClusterDNS(namespace)
	dns.install(t)
	c := startBundledNATS(t, r, dns)
	replicas, err := strconv.Atoi(environment(t, r, r.deployments[fullname("graph-engine")])["NOVA_STREAM_REPLICAS"])
	if err != nil {
		t.Fatal(err)
	}

	// The services declare NOVA's streams and the code generator its
	// consumer, as they do at start-up; nothing consumes from it.
	engine := c.connectBus(t, ctx, "graph-engine", replicas)
	retry(t, ctx, "declare the streams", engine.EnsureStreams)
	spec := agent.Spec{Name: bus.AgentCodeGenerator}
	codeGenerator := c.connectBus(t, ctx, bus.AgentCodeGenerator, replicas)
	var cons jetstream.Consumer
	retry(t, ctx, "declare the consumer", func(ctx context.Context) (err error) {
		cons, err = codeGenerator.DeclareConsumer(ctx, spec.Consumer())
		return err
	})
	admin := c.jetStream(t, "admin")
	consumer := spec.Consumer()
	info := waitConsumer(t, ctx, admin, consumer, "has a leader and current replicas", settled(0))
	if n := len(info.Cluster.Replicas) + 1; n != replicas {
		t.Fatalf("consumer on %d servers, want %d", n, replicas)
	}
	leader := info.Cluster.Leader

	// The endpoint's first answer comes from a server that does not lead
	// the consumer; the client Service's connections reach that one too.
	first := c.podOtherThan(leader)
	c.routeServices(first)
	endpoint := trigger["natsServerMonitoringEndpoint"]
	if got := serverNameAt(t, ctx, endpoint); got != first.name {
		t.Fatalf("%s answers from %s, want %s (not the leader %s)", endpoint, got, first.name, leader)
	}

	for i := range backlog {
		ref := &novav1.StepRef{ExecutionId: "exec-1", NodeId: "task", StepId: fmt.Sprintf("exec-1/task/1/%d", i), Visit: 1, Attempt: 1}
		if err := engine.PublishProto(ctx, bus.CommandSubject(spec.Name), ref.StepId, bus.TypeCodeGenerate,
			&novav1.GenerateCode{Ref: ref, Stage: "TASK"}, nil); err != nil {
			t.Fatalf("graph-engine sends a command: %v", err)
		}
	}
	waitConsumer(t, ctx, admin, consumer, fmt.Sprintf("holds %d commands", backlog), settled(backlog))

	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)

	// The endpoint before the fix: the client Service.
	_, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	oldTrigger := maps.Clone(trigger)
	oldTrigger["natsServerMonitoringEndpoint"] = net.JoinHostPort(dns.fqdn(c.clientService), port)
	old, err := kedascaler.New(oldTrigger, client)
	if err != nil {
		t.Fatal(err)
	}
	if lag, err := old.Lag(ctx); err == nil {
		t.Errorf("through the client Service KEDA read lag %d; want its first poll to fail on <leader>.<client Service>", lag)
	} else {
		t.Logf("through the client Service, first poll: %v", err)
	}
	// Until the leader changes, KEDA's next polls take whatever the server
	// the Service reaches reports (not asserted: it is nats-server's
	// business what a follower reports).
	lag, err := old.Lag(ctx)
	t.Logf("through the client Service, second poll (read from %s, a follower): lag %d, error %v", first.name, lag, err)

	scaler, err := kedascaler.New(trigger, client)
	if err != nil {
		t.Fatal(err)
	}
	wantLag(t, ctx, scaler, backlog, "first poll")
	wantLag(t, ctx, scaler, backlog, "second poll")

	// Move the consumer's leader to the server that is neither the old
	// leader (where KEDA read last) nor the endpoint's first answer.
	target := c.podOtherThan(leader, first.name)
	stepDown(t, ctx, c.conn(t, "admin"), consumer, target.name)
	waitConsumer(t, ctx, admin, consumer, "is led by "+target.name, func(ci *jetstream.ConsumerInfo) bool {
		return ci.Cluster.Leader == target.name && settled(backlog)(ci)
	})
	wantLag(t, ctx, scaler, backlog, "poll after the leader moved to "+target.name)
	if lag, err := old.Lag(ctx); err == nil {
		t.Errorf("through the client Service after the leader moved, KEDA read lag %d; want the poll to fail", lag)
	}

	// The code generator works off the backlog.
	msgs, err := cons.Fetch(backlog, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for m := range msgs.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("ack: %v", err)
		}
		done++
	}
	if done != backlog {
		t.Fatalf("code-generator received %d commands, want %d (%v)", done, backlog, msgs.Error())
	}
	waitConsumer(t, ctx, admin, consumer, "is drained", settled(0))
	wantLag(t, ctx, scaler, 0, "poll after the backlog was worked off")
}

// wantLag is one KEDA poll that must succeed and read want.
func wantLag(t *testing.T, ctx context.Context, s *kedascaler.Scaler, want int64, poll string) {
	t.Helper()
	lag, err := s.Lag(ctx)
	if err != nil {
		t.Fatalf("%s: KEDA cannot read the lag: %v", poll, err)
	}
	if lag != want {
		t.Errorf("%s: KEDA reads lag %d, want the backlog %d", poll, lag, want)
	}
}

// settled: the consumer's leader holds n undelivered or unacknowledged
// commands and every replica is current, so every server could answer.
func settled(n int) func(*jetstream.ConsumerInfo) bool {
	return func(ci *jetstream.ConsumerInfo) bool {
		if ci.Cluster == nil || ci.Cluster.Leader == "" || ci.NumPending+uint64(ci.NumAckPending) != uint64(n) {
			return false
		}
		for _, p := range ci.Cluster.Replicas {
			if !p.Current {
				return false
			}
		}
		return true
	}
}

// waitConsumer reads the consumer's info (from its leader, through the
// JetStream API) until cond holds.
func waitConsumer(t *testing.T, ctx context.Context, js jetstream.JetStream, c bus.Consumer, what string, cond func(*jetstream.ConsumerInfo) bool) *jetstream.ConsumerInfo {
	t.Helper()
	var last *jetstream.ConsumerInfo
	var lastErr error
	for {
		// No leader answers while one is being elected.
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		cons, err := js.Consumer(attempt, c.Stream, c.Durable)
		cancel()
		if err == nil {
			last, lastErr = cons.CachedInfo(), nil
			if cond(last) {
				return last
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("consumer %s never %s: last info %+v, error %v", c.Durable, what, last, lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stepDown asks the consumer's leader to hand over to preferred.
func stepDown(t *testing.T, ctx context.Context, nc *nats.Conn, c bus.Consumer, preferred string) {
	t.Helper()
	req, err := json.Marshal(map[string]any{"placement": map[string]any{"preferred": preferred}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.LEADER.STEPDOWN."+c.Stream+"."+c.Durable, req)
	if err != nil {
		t.Fatalf("consumer leader stepdown: %v", err)
	}
	var resp struct {
		Success bool            `json:"success"`
		Error   json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil || !resp.Success {
		t.Fatalf("consumer leader stepdown: %s", msg.Data)
	}
}

// serverNameAt is the name of the server that answers /varz at endpoint.
func serverNameAt(t *testing.T, ctx context.Context, endpoint string) string {
	t.Helper()
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+endpoint+"/varz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("monitoring endpoint %s: %v", endpoint, err)
	}
	defer resp.Body.Close()
	var varz struct {
		ServerName string `json:"server_name"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&varz); err != nil {
		t.Fatal(err)
	}
	return varz.ServerName
}

// retry calls f, each time with a few seconds, until it succeeds: a new
// cluster answers late or "JetStream temporarily unavailable" until it has
// elected its leaders.
func retry(t *testing.T, ctx context.Context, what string, f func(context.Context) error) {
	t.Helper()
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(attempt)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// bundledNATS is the rendered NATS StatefulSet running in process.
type bundledNATS struct {
	dns             *clusterDNS
	headlessService string
	clientService   string
	pods            []*natsPod
}

type natsPod struct {
	name string
	addr netip.Addr
	srv  *server.Server
}

// startBundledNATS starts one nats-server per replica of the rendered
// StatefulSet, each with the rendered configuration as its pod reads it,
// listening on the pod's own address, and registers the pods and the
// NATS Services in dns.
func startBundledNATS(t *testing.T, r *rendered, dns *clusterDNS) *bundledNATS {
	t.Helper()
	sts := r.statefulSets[release+"-nats"]
	if sts == nil || sts.Spec.Replicas == nil {
		t.Fatalf("no NATS StatefulSet with replicas; have %v", keys(r.statefulSets))
	}
	c := &bundledNATS{dns: dns, headlessService: sts.Spec.ServiceName}
	for name, svc := range r.services {
		if svc.Spec.Selector["app.kubernetes.io/component"] == "nats" && name != c.headlessService {
			c.clientService = name
		}
	}
	if h := r.services[c.headlessService]; h == nil || h.Spec.ClusterIP != "None" || c.clientService == "" {
		t.Fatalf("NATS Services %v: want the StatefulSet's headless %q and a client Service", keys(r.services), c.headlessService)
	}

	conf := layOutNATSConfig(t, r)
	var opts []*server.Options
	for i := range int(*sts.Spec.Replicas) {
		c.pods = append(c.pods, &natsPod{name: fmt.Sprintf("%s-%d", sts.Name, i)})
		opts = append(opts, conf.parse(t, c.pods[i].name))
	}
	addrs := loopbackBlock(t, len(c.pods), opts[0].Port, opts[0].Cluster.Port, opts[0].HTTPPort)
	for i, p := range c.pods {
		p.addr = addrs[i]
		dns.set(p.name+"."+c.headlessService, p.addr)
	}
	c.routeServices(c.pods[0])

	for i, p := range c.pods {
		o := opts[i]
		// What the pod provides: its address and its volume.
		o.Host, o.Cluster.Host, o.HTTPHost = p.addr.String(), p.addr.String(), p.addr.String()
		o.StoreDir = t.TempDir()
		o.PidFile = ""
		o.NoSigs, o.NoLog = true, true
		srv, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		p.srv = srv
		srv.Start()
		t.Cleanup(func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		})
	}
	for _, p := range c.pods {
		if !p.srv.ReadyForConnections(10 * time.Second) {
			t.Fatalf("%s did not start", p.name)
		}
		if got := p.srv.Name(); got != p.name {
			t.Fatalf("server name %q, want the pod's %q", got, p.name)
		}
	}
	// The servers find each other through the route URLs of the config.
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range c.pods {
		for !p.srv.JetStreamIsCurrent() {
			if time.Now().After(deadline) {
				t.Fatalf("%s never joined a JetStream cluster with a leader (%d routes)", p.name, p.srv.NumRoutes())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// routeServices sets the Services' DNS: the headless one lists every pod,
// first first; the client Service's virtual IP reaches first.
func (c *bundledNATS) routeServices(first *natsPod) {
	addrs := []netip.Addr{first.addr}
	for _, p := range c.pods {
		if p != first {
			addrs = append(addrs, p.addr)
		}
	}
	c.dns.set(c.headlessService, addrs...)
	c.dns.set(c.clientService, first.addr)
}

func (c *bundledNATS) podOtherThan(names ...string) *natsPod {
	for _, p := range c.pods {
		if !slices.Contains(names, p.name) {
			return p
		}
	}
	return nil
}

func (c *bundledNATS) urls() string {
	var urls []string
	for _, p := range c.pods {
		urls = append(urls, p.srv.ClientURL())
	}
	return strings.Join(urls, ",")
}

// conn connects as user with the inbox prefix the accounts require.
func (c *bundledNATS) conn(t *testing.T, user string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.urls(), c.natsOptions(user)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (c *bundledNATS) jetStream(t *testing.T, user string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.conn(t, user))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// connectBus connects as a service does (pkg/bus), as its own user.
func (c *bundledNATS) connectBus(t *testing.T, ctx context.Context, user string, replicas int) *bus.Bus {
	t.Helper()
	b, err := bus.Connect(ctx, c.urls(), bus.WithName(user),
		bus.WithNATSOptions(c.natsOptions(user)...),
		bus.WithStreamOptions(bus.StreamOptions{Replicas: replicas}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(b.Close)
	return b
}

func (c *bundledNATS) natsOptions(user string) []nats.Option {
	return []nats.Option{nats.UserInfo(user, natsPassword(user)), nats.CustomInboxPrefix("_INBOX." + user)}
}
