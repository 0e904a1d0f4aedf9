package workflow

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// HostPattern is one entry of allow_hosts: the destinations a networked node
// may reach through the sandbox's egress proxy.
//
//	example.com         that host on the web ports, 80 and 443
//	example.com:8443    that host on that port
//	example.com:*       that host on any port
//	*.example.com       any subdomain of example.com (not example.com itself)
//	*                   any host on 80 and 443 (public addresses only)
//	10.0.0.5:9000       an IP literal; the only way to reach a loopback,
//	[::1]:8080          private or link-local address
type HostPattern struct {
	// Host is lower-case without a trailing dot: a name, "*", "*.suffix" or an
	// IP literal (then IP is valid).
	Host string
	IP   netip.Addr
	// Port is 0 for the web ports (80 and 443), -1 for any port.
	Port int
}

// ParseHostPattern parses one allow_hosts entry.
func ParseHostPattern(s string) (HostPattern, error) {
	orig := s
	s = strings.TrimSpace(s)
	bad := func(why string) (HostPattern, error) {
		return HostPattern{}, fmt.Errorf("allow_hosts entry %q: %s; write a host or host:port such as api.example.com or api.example.com:8443", orig, why)
	}
	switch {
	case s == "":
		return bad("empty")
	case strings.Contains(s, "://"):
		return bad("no scheme")
	case strings.ContainsAny(s, "/?#@ \t"):
		return bad("no path, query, user or spaces")
	}
	host, portText := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return bad("unclosed [ of an IPv6 address")
		}
		host, portText = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if rest := s[end+1:]; rest != "" && !strings.HasPrefix(rest, ":") {
			return bad("unexpected text after ]")
		}
	case strings.Count(s, ":") == 1:
		host, portText, _ = strings.Cut(s, ":")
		if portText == "" {
			return bad("empty port")
		}
	case strings.Count(s, ":") > 1: // a bare IPv6 address
	}
	p := HostPattern{Host: strings.TrimSuffix(strings.ToLower(host), ".")}
	switch portText {
	case "":
	case "*":
		p.Port = -1
	default:
		n, err := strconv.Atoi(portText)
		if err != nil || n < 1 || n > 65535 {
			return bad("the port must be 1-65535 or *")
		}
		p.Port = n
	}
	if ip, err := netip.ParseAddr(p.Host); err == nil {
		p.IP = ip.Unmap()
		p.Host = p.IP.String()
		return p, nil
	}
	name := strings.TrimPrefix(p.Host, "*.")
	if p.Host == "*" {
		return p, nil
	}
	if !validHostname(name) {
		return bad("not a valid host name")
	}
	return p, nil
}

func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Matches reports whether the pattern allows host:port. host is as the
// program asked for it (a name or an IP literal).
func (p HostPattern) Matches(host string, port int) bool {
	switch {
	case p.Port == 0 && port != 80 && port != 443:
		return false
	case p.Port > 0 && port != p.Port:
		return false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return p.IP.IsValid() && p.IP == ip.Unmap() || p.Host == "*"
	}
	switch {
	case p.Host == "*":
		return true
	case strings.HasPrefix(p.Host, "*."):
		return strings.HasSuffix(host, p.Host[1:])
	default:
		return host == p.Host
	}
}

// String is the canonical form of the pattern.
func (p HostPattern) String() string {
	host := p.Host
	if p.IP.Is6() {
		host = "[" + host + "]"
	}
	switch {
	case p.Port < 0:
		return host + ":*"
	case p.Port > 0:
		return host + ":" + strconv.Itoa(p.Port)
	}
	return host
}
