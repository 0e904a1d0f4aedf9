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
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1::1": true,
		"127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false, "169.254.169.254": false,
		"100.64.0.1": false, "0.0.0.0": false, "::1": false, "fe80::1": false, "fd00::1": false, "224.0.0.1": false,
		"198.18.0.1": false, "2001:db8::1": false,
	} {
		if got := public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("public(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	p := &Proxy{Logger: slog.New(slog.DiscardHandler)}
	tests := []struct {
		name   string
		allow  []string
		host   string
		denied string // "" when the dial must succeed
	}{
		{name: "IP literal allowed explicitly", allow: []string{"127.0.0.1:" + strconv.Itoa(port)}, host: "127.0.0.1"},
		{name: "other port", allow: []string{"127.0.0.1:1"}, host: "127.0.0.1", denied: "not in this node's allow_hosts"},
		{name: "nothing allowed", host: "127.0.0.1", denied: "allowed: none"},
		{name: "name of a loopback address", allow: []string{"localhost:*"}, host: "localhost", denied: "not a public address"},
		{name: "wildcard does not reach private addresses", allow: []string{"*:*"}, host: "127.0.0.1", denied: "not a public address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy, err := NewPolicy(tt.allow)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := p.Dial(context.Background(), policy, tt.host, port)
			if tt.denied == "" {
				if err != nil {
					t.Fatalf("Dial: %v", err)
				}
				conn.Close()
				return
			}
			if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), tt.denied) {
				t.Errorf("err = %v, want ErrDenied mentioning %q", err, tt.denied)
			}
		})
	}
}

// Through a broker, as a sandbox uses it: a stream for an absolute-URI GET,
// one for a CONNECT tunnel, and a refused destination.
func TestServeBroker(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path %s", r.URL.Path)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	policy, err := NewPolicy([]string{u.Host})
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours := fileConn(t, fds[0]).(*net.UnixConn)
	sandbox := fileConn(t, fds[1]).(*net.UnixConn)
	defer sandbox.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&Proxy{Logger: slog.New(slog.DiscardHandler)}).ServeBroker(ctx, ours, policy)
	}()
	defer func() { cancel(); <-done }()

	stream := func() net.Conn {
		t.Helper()
		if _, err := sandbox.Write([]byte("c")); err != nil {
			t.Fatal(err)
		}
		oob := make([]byte, unix.CmsgSpace(4))
		_, oobn, _, _, err := sandbox.ReadMsgUnix(make([]byte, 16), oob)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			t.Fatalf("control message: %v", err)
		}
		got, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(got) != 1 {
			t.Fatalf("rights: %v", err)
		}
		return fileConn(t, got[0])
	}

	c := stream()
	fmt.Fprintf(c, "GET %s/plain HTTP/1.1\r\nHost: %s\r\n\r\n", srv.URL, u.Host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "path /plain" {
		t.Errorf("GET through the proxy: %d %q", resp.StatusCode, body)
	}
	c.Close()

	c = stream()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", u.Host, u.Host)
	br := bufio.NewReader(c)
	resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	fmt.Fprintf(c, "GET /tunnel HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", u.Host)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if string(body) != "path /tunnel" {
		t.Errorf("through the tunnel: %q", body)
	}
	c.Close()

	c = stream()
	fmt.Fprint(c, "CONNECT 203.0.113.1:443 HTTP/1.1\r\nHost: 203.0.113.1:443\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Nova-Egress") != "refused" || !strings.Contains(string(body), "203.0.113.1:443 is not in this node's allow_hosts") {
		t.Errorf("refused CONNECT: %d %q", resp.StatusCode, body)
	}
	c.Close()
}

func fileConn(t *testing.T, fd int) net.Conn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "test")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
