package chart

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// clusterDNS answers A queries the way a cluster's DNS answers a pod in
// namespace: Services and the pods of a StatefulSet under its headless
// Service, and no such host for every other name. It serves this process's
// resolver (net.DefaultResolver, which nats-server's routes and Go's HTTP
// clients use), in process, so the test needs neither root nor a port 53.
type clusterDNS struct {
	namespace string

	mu      sync.Mutex
	records map[string][]netip.Addr // fully qualified, without the final dot

	conns sync.WaitGroup
}

func newClusterDNS(namespace string) *clusterDNS {
	return &clusterDNS{namespace: namespace, records: map[string][]netip.Addr{}}
}

// fqdn is the cluster name of a Service, or of a pod when name is
// <pod>.<headless service>.
func (d *clusterDNS) fqdn(name string) string {
	return name + "." + d.namespace + ".svc.cluster.local"
}

// set makes name (a Service, or <pod>.<service>) resolve to addrs, in
// that order.
func (d *clusterDNS) set(name string, addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.records[d.fqdn(name)] = addrs
}

// lookup applies a pod's search path (<namespace>.svc.cluster.local,
// svc.cluster.local, cluster.local): NATS's route URLs name
// nova-nats-0.nova-nats-headless, short.
func (d *clusterDNS) lookup(name string) ([]netip.Addr, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, suffix := range []string{"", "." + d.namespace + ".svc.cluster.local", ".svc.cluster.local", ".cluster.local"} {
		if addrs, ok := d.records[name+suffix]; ok {
			return addrs, true
		}
	}
	return nil, false
}

// install makes net.DefaultResolver ask d until the test ends. It is
// process-wide: a test that installs it must not run in parallel.
func (d *clusterDNS) install(t *testing.T) {
	t.Helper()
	preferGo, dial := net.DefaultResolver.PreferGo, net.DefaultResolver.Dial
	net.DefaultResolver.PreferGo, net.DefaultResolver.Dial = true, d.dial
	t.Cleanup(func() {
		net.DefaultResolver.PreferGo, net.DefaultResolver.Dial = preferGo, dial
		d.conns.Wait()
	})
}

// dial hands the resolver one end of a pipe and answers on the other; the
// resolver speaks DNS over TCP framing on a conn that is not a PacketConn.
func (d *clusterDNS) dial(context.Context, string, string) (net.Conn, error) {
	client, srv := net.Pipe()
	d.conns.Add(1)
	go func() {
		defer d.conns.Done()
		defer srv.Close()
		for {
			var size [2]byte
			if _, err := io.ReadFull(srv, size[:]); err != nil {
				return // the resolver closed its end
			}
			query := make([]byte, binary.BigEndian.Uint16(size[:]))
			if _, err := io.ReadFull(srv, query); err != nil {
				return
			}
			answer, err := d.answer(query)
			if err != nil {
				return
			}
			if _, err := srv.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(answer))), answer...)); err != nil {
				return
			}
		}
	}()
	return client, nil
}

func (d *clusterDNS) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	addrs, ok := d.lookup(strings.TrimSuffix(q.Name.String(), "."))
	rcode := dnsmessage.RCodeSuccess
	if !ok {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: rcode,
	})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if q.Type == dnsmessage.TypeA {
		for _, a := range addrs {
			rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}
			if err := b.AResource(rh, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}

// loopbackBlock returns n loopback addresses of one random 127.x.y.0/24 on
// which every port is free, like pods that each have their own IP.
func loopbackBlock(t *testing.T, n int, ports ...int) []netip.Addr {
	t.Helper()
	for range 20 {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		var addrs []netip.Addr
		free := true
		for i := range n {
			a := netip.AddrFrom4([4]byte{127, b[0]%250 + 1, b[1]%250 + 1, byte(10 + i)})
			addrs = append(addrs, a)
			for _, port := range ports {
				l, err := net.Listen("tcp", netip.AddrPortFrom(a, uint16(port)).String())
				if err != nil {
					free = false
					continue
				}
				l.Close()
			}
		}
		if free {
			return addrs
		}
	}
	t.Fatalf("no loopback block with ports %v free", ports)
	return nil
}
