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

// Cluster is a NATS JetStream cluster of in-process nats-servers on loopback,
// each with its own file store in DataDir/nats-<i>. It is what a deployment
// of three servers looks like to clients: streams and KV buckets with three
// replicas survive one server going away, and a client given every URL
// reconnects to a remaining one.
//
// Nodes can be stopped and started again one at a time (StopNode, StartNode),
// on the same ports and store, as a server that crashed and came back.
type Cluster struct {
	opts   Options
	mu     sync.Mutex
	nodes  []*clusterNode
	routes []*url.URL
}

type clusterNode struct {
	name        string
	dir         string
	port        int
	clusterPort int
	srv         *server.Server // nil while stopped
}

// StartCluster starts size nats-servers (at least 3, so that a majority
// survives one loss) clustered with each other, and returns once every
// server has joined a JetStream cluster with a meta leader. Client ports
// are opts.NATSPort, +1, +2... when NATSPort is set, free ports otherwise.
func StartCluster(ctx context.Context, opts Options, size int) (*Cluster, error) {
	if size < 3 {
		return nil, fmt.Errorf("start nats cluster: %d servers: a cluster needs at least 3, so that a majority survives losing one", size)
	}
	ports, err := clusterPorts(opts.NATSPort, size)
	if err != nil {
		return nil, fmt.Errorf("start nats cluster: %w", err)
	}
	c := &Cluster{opts: opts}
	for i := range size {
		dir, err := opts.subDir(fmt.Sprintf("nats-%d", i))
		if err != nil {
			return nil, fmt.Errorf("start nats cluster: %w", err)
		}
		n := &clusterNode{name: fmt.Sprintf("nova-%d", i), dir: dir, port: ports[2*i], clusterPort: ports[2*i+1]}
		c.nodes = append(c.nodes, n)
		c.routes = append(c.routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(n.clusterPort))})
	}
	for i := range c.nodes {
		if err := c.startNode(i); err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("start nats cluster: %w", err)
		}
	}
	for i := range c.nodes {
		if err := c.WaitCurrent(ctx, i); err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("start nats cluster: %w", err)
		}
	}
	return c, nil
}

// clusterPorts returns a client and a route port per server: consecutive
// client ports from base when it is set (routes on free ports), or free ports.
func clusterPorts(base, size int) ([]int, error) {
	var ports []int
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
			p, err := free()
			if err != nil {
				return nil, err
			}
			client = p
		}
		route, err := free()
		if err != nil {
			return nil, err
		}
		ports = append(ports, client, route)
	}
	return ports, nil
}

func (c *Cluster) startNode(i int) error {
	n := c.nodes[i]
	srv, err := server.NewServer(&server.Options{
		ServerName: n.name,
		Host:       "127.0.0.1",
		Port:       n.port,
		JetStream:  true,
		StoreDir:   n.dir,
		Cluster: server.ClusterOpts{
			Name: ClusterName,
			Host: "127.0.0.1",
			Port: n.clusterPort,
		},
		Routes: c.routes,
		// Clients are given every URL; they need not learn others from gossip.
		NoSigs: true,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	srv.SetLoggerV2(natsLogger{l: c.opts.quietLogger("nats", slog.LevelWarn).With("server", n.name)}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(startTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("%s did not accept connections on port %d within %s", n.name, n.port, startTimeout)
	}
	c.mu.Lock()
	n.srv = srv
	c.mu.Unlock()
	return nil
}

// WaitCurrent waits until server i is running and current with a meta
// leader of the JetStream cluster.
func (c *Cluster) WaitCurrent(ctx context.Context, i int) error {
	ctx, cancel := readyDeadline(ctx)
	defer cancel()
	for {
		srv := c.server(i)
		if srv == nil {
			return fmt.Errorf("%s is stopped", c.nodes[i].name)
		}
		if srv.JetStreamIsCurrent() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never joined a JetStream cluster with a meta leader (%d routes): %w", c.nodes[i].name, srv.NumRoutes(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].srv
}

// Size is the number of servers, running or stopped.
func (c *Cluster) Size() int { return len(c.nodes) }

// Name is server i's name (nova-<i>).
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// URL lists every server's client URL, comma-separated, as nats.Connect
// and NATS_URL take it.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", n.port)
	}
	return strings.Join(urls, ",")
}

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
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// StartNode starts a stopped server i again on its ports and store and
// waits until it is current with the cluster.
func (c *Cluster) StartNode(ctx context.Context, i int) error {
	if c.server(i) != nil {
		return fmt.Errorf("%s is running", c.nodes[i].name)
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
