package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterName is the NATS cluster name of the embedded cluster.
const ClusterName = "nova-devstack"

// ClusterSpec says where each server of a cluster listens and keeps its
// store: server i is named nova-<i>, serves clients on ClientPorts[i], routes
// on RoutePorts[i] and stores in DataDir/nats-<i>, all on 127.0.0.1.
type ClusterSpec struct {
	DataDir     string `json:"data_dir"`
	ClientPorts []int  `json:"client_ports"`
	RoutePorts  []int  `json:"route_ports"`
}

// NewClusterSpec lays out a cluster of size servers (at least 3, so that a
// majority survives one loss). Client ports are basePort, +1, +2... when
// basePort is set, free ports otherwise; route ports are free ports.
func NewClusterSpec(dataDir string, basePort, size int) (ClusterSpec, error) {
	if size < 3 {
		return ClusterSpec{}, fmt.Errorf("%d servers: a NATS cluster needs at least 3, so that a majority survives losing one", size)
	}
	if dataDir == "" {
		return ClusterSpec{}, ErrNoDataDir
	}
	clients, routes, err := clusterPorts(basePort, size)
	if err != nil {
		return ClusterSpec{}, err
	}
	return ClusterSpec{DataDir: dataDir, ClientPorts: clients, RoutePorts: routes}, nil
}

// Size is the number of servers.
func (s ClusterSpec) Size() int { return len(s.ClientPorts) }

// Name is server i's name.
func (s ClusterSpec) Name(i int) string { return fmt.Sprintf("nova-%d", i) }

// URL lists every server's client URL, comma-separated, as nats.Connect
// and NATS_URL take it.
func (s ClusterSpec) URL() string {
	urls := make([]string, len(s.ClientPorts))
	for i, p := range s.ClientPorts {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	return strings.Join(urls, ",")
}

// StartClusterNode starts server i of spec and returns once it accepts
// client connections (it may not have joined the cluster yet: see
// NATS.WaitCurrent). Each server may run in its own process, so that one
// can be killed alone.
func StartClusterNode(spec ClusterSpec, i int, logger *slog.Logger) (*NATS, error) {
	if i < 0 || i >= spec.Size() || len(spec.RoutePorts) != spec.Size() {
		return nil, fmt.Errorf("start nats cluster node %d: the spec has %d servers", i, spec.Size())
	}
	dir, err := Options{DataDir: spec.DataDir}.subDir(fmt.Sprintf("nats-%d", i))
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name(i), err)
	}
	var routes []*url.URL
	for _, p := range spec.RoutePorts {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(p))})
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: spec.Name(i),
		Host:       "127.0.0.1",
		Port:       spec.ClientPorts[i],
		JetStream:  true,
		StoreDir:   dir,
		Cluster: server.ClusterOpts{
			Name: ClusterName,
			Host: "127.0.0.1",
			Port: spec.RoutePorts[i],
		},
		Routes: routes,
		NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name(i), err)
	}
	srv.SetLoggerV2(natsLogger{l: Options{Logger: logger}.quietLogger("nats", slog.LevelWarn).With("server", spec.Name(i))}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(startTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("%s did not accept connections on port %d within %s", spec.Name(i), spec.ClientPorts[i], startTimeout)
	}
	return &NATS{srv: srv, url: srv.ClientURL()}, nil
}

// WaitCurrent waits until the server is current with a meta leader of its
// JetStream cluster.
func (n *NATS) WaitCurrent(ctx context.Context) error {
	ctx, cancel := readyDeadline(ctx)
	defer cancel()
	for !n.srv.JetStreamIsCurrent() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never joined a JetStream cluster with a meta leader (%d routes): %w", n.srv.Name(), n.srv.NumRoutes(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Cluster is a NATS JetStream cluster of in-process nats-servers on loopback
// (see ClusterSpec). It is what a deployment of three servers looks like to
// clients: streams and KV buckets with three replicas survive one server
// going away, and a client given every URL reconnects to a remaining one.
//
// Servers can be stopped and started again one at a time (StopNode,
// StartNode), on the same ports and store, as a server that crashed and
// came back.
type Cluster struct {
	spec  ClusterSpec
	opts  Options
	mu    sync.Mutex
	nodes []*NATS // nil while stopped
}

// StartCluster starts size nats-servers clustered with each other (see
// NewClusterSpec for the ports), and returns once every server has joined
// a JetStream cluster with a meta leader.
func StartCluster(ctx context.Context, opts Options, size int) (*Cluster, error) {
	spec, err := NewClusterSpec(opts.DataDir, opts.NATSPort, size)
	if err != nil {
		return nil, fmt.Errorf("start nats cluster: %w", err)
	}
	c := &Cluster{spec: spec, opts: opts, nodes: make([]*NATS, size)}
	for i := range size {
		if err := c.startNode(i); err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("start nats cluster: %w", err)
		}
	}
	for i := range size {
		if err := c.WaitCurrent(ctx, i); err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("start nats cluster: %w", err)
		}
	}
	if err := c.waitPeers(ctx); err != nil {
		c.Shutdown()
		return nil, fmt.Errorf("start nats cluster: %w", err)
	}
	return c, nil
}

// waitPeers waits until the meta leader counts every server as an online
// JetStream peer: before it does, a stream with as many replicas as there
// are servers is refused ("no suitable peers for placement").
func (c *Cluster) waitPeers(ctx context.Context) error {
	ctx, cancel := readyDeadline(ctx)
	defer cancel()
	for {
		c.mu.Lock()
		online := 0
		for _, n := range c.nodes {
			if n != nil {
				online = max(online, len(n.srv.JetStreamClusterPeers()))
			}
		}
		c.mu.Unlock()
		if online == len(c.nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the meta leader counts %d of %d servers online: %w", online, len(c.nodes), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterPorts returns a client and a route port per server: consecutive
// client ports from base when it is set (routes on free ports), or free ports.
func clusterPorts(base, size int) (clients, routes []int, err error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	free := func() (int, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("pick a free port: %w", err)
		}
		listeners = append(listeners, l)
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for i := range size {
		client := base + i
		if base <= 0 {
			if client, err = free(); err != nil {
				return nil, nil, err
			}
		}
		route, err := free()
		if err != nil {
			return nil, nil, err
		}
		clients, routes = append(clients, client), append(routes, route)
	}
	return clients, routes, nil
}

func (c *Cluster) startNode(i int) error {
	n, err := StartClusterNode(c.spec, i, c.opts.Logger)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
	return nil
}

// WaitCurrent waits until server i is running and current with a meta
// leader of the JetStream cluster.
func (c *Cluster) WaitCurrent(ctx context.Context, i int) error {
	n := c.node(i)
	if n == nil {
		return fmt.Errorf("%s is stopped", c.spec.Name(i))
	}
	return n.WaitCurrent(ctx)
}

func (c *Cluster) node(i int) *NATS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Server is server i's nats-server (its monitoring calls: Varz, Jsz, ...),
// nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server { return c.server(i) }

func (c *Cluster) server(i int) *server.Server {
	if n := c.node(i); n != nil {
		return n.srv
	}
	return nil
}

// Spec is where the servers listen and store.
func (c *Cluster) Spec() ClusterSpec { return c.spec }

// Size is the number of servers, running or stopped.
func (c *Cluster) Size() int { return c.spec.Size() }

// Name is server i's name (nova-<i>).
func (c *Cluster) Name(i int) string { return c.spec.Name(i) }

// URL lists every server's client URL, comma-separated.
func (c *Cluster) URL() string { return c.spec.URL() }

// MetaLeader is the index of the server that leads the JetStream meta
// group, or -1 when none does (an election is under way).
func (c *Cluster) MetaLeader() int {
	return c.find(func(s *server.Server) bool { return s.JetStreamIsLeader() })
}

// StreamLeader is the index of the server that leads stream in the
// default account, or -1.
func (c *Cluster) StreamLeader(stream string) int {
	return c.find(func(s *server.Server) bool { return s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) })
}

func (c *Cluster) find(pred func(*server.Server) bool) int {
	for i := range c.nodes {
		if s := c.server(i); s != nil && pred(s) {
			return i
		}
	}
	return -1
}

// StopNode shuts server i down as a crash would look to the others: its
// routes and client connections drop; its store stays for StartNode.
func (c *Cluster) StopNode(i int) {
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n != nil {
		n.Shutdown()
	}
}

// StartNode starts a stopped server i again on its ports and store and
// waits until it is current with the cluster.
func (c *Cluster) StartNode(ctx context.Context, i int) error {
	if c.node(i) != nil {
		return fmt.Errorf("%s is running", c.spec.Name(i))
	}
	if err := c.startNode(i); err != nil {
		return err
	}
	return c.WaitCurrent(ctx, i)
}

// Shutdown stops every server and waits for each.
func (c *Cluster) Shutdown() {
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() { c.StopNode(i) })
	}
	wg.Wait()
}
