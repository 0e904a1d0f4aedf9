// Package egress is the sandbox's only way out to the network: an HTTP forward
// proxy (CONNECT for https, absolute-URI requests for http) that lets a program
// reach the hosts its node allows and nothing else.
//
// A sandbox has no network interface but its own loopback. When its node asks
// for the network, the runner gives it a broker socket: for every connection
// the program opens to the proxy address on its loopback, the sandbox asks the
// broker for a new stream, which the service hands over (SCM_RIGHTS) and
// serves here with that node's Policy. No path or port of the host is shared
// with the sandbox.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/pkg/workflow"
)

// ErrDenied is wrapped by the errors of destinations the policy refuses.
var ErrDenied = errors.New("destination not allowed")

// Policy is what one node may reach: its allow_hosts and its workflow's.
type Policy struct {
	patterns []workflow.HostPattern
}

// NewPolicy parses allow_hosts entries (see workflow.HostPattern).
func NewPolicy(allowHosts []string) (Policy, error) {
	var p Policy
	for _, s := range allowHosts {
		hp, err := workflow.ParseHostPattern(s)
		if err != nil {
			return Policy{}, err
		}
		p.patterns = append(p.patterns, hp)
	}
	return p, nil
}

// String lists the allowed patterns.
func (p Policy) String() string {
	if len(p.patterns) == 0 {
		return "none"
	}
	s := make([]string, len(p.patterns))
	for i, hp := range p.patterns {
		s[i] = hp.String()
	}
	return strings.Join(s, ", ")
}

// match returns the pattern allowing host:port.
func (p Policy) match(host string, port int) (workflow.HostPattern, bool) {
	for _, hp := range p.patterns {
		if hp.Matches(host, port) {
			return hp, true
		}
	}
	return workflow.HostPattern{}, false
}

// Proxy serves the streams of sandboxes. It is safe for concurrent use.
type Proxy struct {
	// Resolver looks names up; default net.DefaultResolver.
	Resolver *net.Resolver
	// DialTimeout bounds each connection attempt; default 10s.
	DialTimeout time.Duration
	// IdleTimeout closes a stream without traffic for this long; default 2m.
	IdleTimeout time.Duration
	Logger      *slog.Logger
}

func (p *Proxy) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.Default()
}

// Dial connects to host:port if the policy allows it. A name is resolved here
// and every address it resolves to must be public: a name cannot lead to the
// host's loopback or private networks (nor rebind to them later, since the
// checked address is the one dialled). Only an IP literal in allow_hosts can
// reach a non-public address.
func (p *Proxy) Dial(ctx context.Context, policy Policy, host string, port int) (net.Conn, error) {
	host = strings.Trim(host, "[]")
	hp, ok := policy.match(host, port)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not in this node's allow_hosts (allowed: %s)", ErrDenied, net.JoinHostPort(host, strconv.Itoa(port)), policy)
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip.Unmap()}
	} else {
		resolver := p.Resolver
		if resolver == nil {
			resolver = net.DefaultResolver
		}
		found, err := resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, a := range found {
			addrs = append(addrs, a.Unmap())
		}
	}
	explicit := hp.IP.IsValid()
	for _, a := range addrs {
		if !explicit && !public(a) {
			return nil, fmt.Errorf("%w: %s resolves to %s, which is not a public address; only an IP literal in allow_hosts can reach it", ErrDenied, host, a)
		}
	}
	timeout := p.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	d := net.Dialer{Timeout: timeout}
	var lastErr error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("no address for %s", host)
	}
	return nil, lastErr
}

// public reports whether a is an address of the internet at large: not
// loopback, private, link-local, shared (CGNAT), multicast, unspecified or
// reserved for documentation and benchmarks.
func public(a netip.Addr) bool {
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// ServeBroker answers a sandbox's broker socket (SOCK_SEQPACKET) until ctx
// ends or the sandbox closes it: every message asks for a new stream, sent back
// as a file descriptor and served with policy. It returns once every stream is
// closed.
func (p *Proxy) ServeBroker(ctx context.Context, broker *net.UnixConn, policy Policy) {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before the wait: ends the streams still open
	stop := context.AfterFunc(ctx, func() { broker.Close() })
	defer stop()
	buf := make([]byte, 16)
	for {
		if _, _, _, _, err := broker.ReadMsgUnix(buf, nil); err != nil {
			return
		}
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			p.logger().Warn("egress stream not created", "err", err)
			return
		}
		_, _, err = broker.WriteMsgUnix([]byte{'s'}, unix.UnixRights(fds[1]), nil)
		unix.Close(fds[1])
		f := os.NewFile(uintptr(fds[0]), "egress-stream")
		conn, cerr := net.FileConn(f)
		f.Close()
		if err != nil || cerr != nil {
			if conn != nil {
				conn.Close()
			}
			return
		}
		wg.Go(func() {
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			p.ServeConn(ctx, conn, policy)
		})
	}
}

// ServeConn serves one proxy connection: CONNECT requests become tunnels,
// absolute-URI http requests are forwarded; anything to a destination outside
// the policy gets 403 with the reason.
func (p *Proxy) ServeConn(ctx context.Context, conn net.Conn, policy Policy) {
	defer conn.Close()
	idle := p.IdleTimeout
	if idle <= 0 {
		idle = 2 * time.Minute
	}
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, portText, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, _ := strconv.Atoi(portText)
			return p.Dial(ctx, policy, host, port)
		},
		MaxIdleConns:          4,
		IdleConnTimeout:       idle,
		ResponseHeaderTimeout: idle,
	}
	defer transport.CloseIdleConnections()

	br := bufio.NewReader(conn)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(idle))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_ = conn.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			p.tunnel(ctx, conn, br, req, policy)
			return
		}
		if !p.forward(ctx, conn, req, transport) {
			return
		}
	}
}

func (p *Proxy) tunnel(ctx context.Context, conn net.Conn, br *bufio.Reader, req *http.Request, policy Policy) {
	host, portText, err := net.SplitHostPort(req.Host)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil {
		refuse(conn, http.StatusBadRequest, fmt.Sprintf("CONNECT needs host:port, got %q", req.Host))
		return
	}
	upstream, err := p.Dial(ctx, policy, host, port)
	if err != nil {
		p.refuseDial(conn, req.Host, err)
		return
	}
	defer upstream.Close()
	stop := context.AfterFunc(ctx, func() { upstream.Close() })
	defer stop()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// Bytes the client sent after its CONNECT request are already buffered.
		_, _ = io.Copy(upstream, br)
		closeWrite(upstream)
	})
	_, _ = io.Copy(conn, upstream)
	// The server is done: so is the tunnel, whatever the client still holds open.
	conn.Close()
	upstream.Close()
	wg.Wait()
}

// forward sends one absolute-URI request on and writes the response back; it
// reports whether the connection can carry another request.
func (p *Proxy) forward(ctx context.Context, conn net.Conn, req *http.Request, transport *http.Transport) bool {
	if !req.URL.IsAbs() || req.URL.Scheme != "http" {
		refuse(conn, http.StatusBadRequest, "send http://host/path requests, or CONNECT host:443 for https")
		return false
	}
	out := req.Clone(ctx)
	out.RequestURI = ""
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		out.Header.Del(h)
	}
	resp, err := transport.RoundTrip(out)
	if err != nil {
		p.refuseDial(conn, req.URL.Host, err)
		return false
	}
	defer resp.Body.Close()
	if err := resp.Write(conn); err != nil {
		return false
	}
	return !req.Close && !resp.Close
}

func (p *Proxy) refuseDial(conn net.Conn, dest string, err error) {
	if errors.Is(err, ErrDenied) {
		p.logger().Info("sandbox egress refused", "destination", dest, "reason", err)
		refuse(conn, http.StatusForbidden, err.Error())
		return
	}
	refuse(conn, http.StatusBadGateway, fmt.Sprintf("cannot reach %s: %v", dest, err))
}

func refuse(conn net.Conn, status int, message string) {
	body := "nova egress: " + message + "\n"
	_, _ = fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Nova-Egress: refused\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
