// Package kedascaler computes consumer lag the way KEDA's nats-jetstream
// scaler does, so that deploy tests can check what KEDA would read from a
// NATS server or cluster loaded with NOVA's configuration.
//
// It is a port of the query walk in pkg/scalers/nats_jetstream_scaler.go of
// github.com/kedacore/keda/v2 at the version deploy/test/go.mod requires
// (TestPortFollowsKEDASource fails when that file changes). The scaler
// itself is not imported: package scalers carries every KEDA scaler and
// their cloud SDKs, which would pull some two hundred modules into this
// module and raise versions (modernc.org/sqlite, under the embedded FerretDB)
// for the whole workspace.
//
// The names, order of requests, caching between polls and error cases are
// KEDA's; a Scaler must be kept across polls, as KEDA keeps its scaler,
// because what one poll caches (the consumer's leader and its URL) decides
// where the next poll reads.
package kedascaler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Scaler is one nats-jetstream trigger: natsJetStreamScaler.
type Scaler struct {
	client *http.Client
	md     metadata
	stream *streamDetail
}

// metadata is natsJetStreamMetadata, with the fields the lag depends on.
type metadata struct {
	account             string
	accountID           string
	stream              string
	consumer            string
	monitoringURL       string
	consumerLeader      string
	monitoringLeaderURL string
	clusterSize         int
}

type jetStreamEndpointResponse struct {
	Accounts    []accountDetail `json:"account_details"`
	MetaCluster metaCluster     `json:"meta_cluster"`
}

type jetStreamServerEndpointResponse struct {
	ConnectUrls []string         `json:"connect_urls"`
	Cluster     jetStreamCluster `json:"cluster"`
	ServerName  string           `json:"server_name"`
}

type jetStreamCluster struct {
	HostUrls []string `json:"urls"`
}

type accountDetail struct {
	ID      string          `json:"id"`
	Name    string          `json:"name"`
	Streams []*streamDetail `json:"stream_detail"`
}

type metaCluster struct {
	ClusterSize int `json:"cluster_size"`
}

type streamDetail struct {
	Name      string           `json:"name"`
	Consumers []consumerDetail `json:"consumer_detail"`
}

type consumerDetail struct {
	Name          string          `json:"name"`
	NumAckPending int             `json:"num_ack_pending"`
	NumPending    int             `json:"num_pending"`
	Cluster       consumerCluster `json:"cluster"`
}

type consumerCluster struct {
	Leader string `json:"leader"`
}

// New reads a trigger's metadata as KEDA does (NewNATSJetStreamScaler,
// parseNATSJetStreamMetadata). client stands for KEDA's shared HTTP client.
func New(trigger map[string]string, client *http.Client) (*Scaler, error) {
	md := metadata{
		account:   trigger["account"],
		accountID: trigger["accountID"],
		stream:    trigger["stream"],
		consumer:  trigger["consumer"],
	}
	endpoint := trigger["natsServerMonitoringEndpoint"]
	for k, v := range map[string]string{"stream": md.stream, "consumer": md.consumer, "natsServerMonitoringEndpoint": endpoint} {
		if v == "" {
			return nil, fmt.Errorf("missing required parameter %q", k)
		}
	}
	useHTTPS := false
	if v, ok := trigger["useHttps"]; ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("useHttps %q: %w", v, err)
		}
		useHTTPS = b
	}
	if md.account == "" && md.accountID == "" {
		return nil, errors.New("no account name or id given")
	}
	if md.accountID == "" {
		md.accountID = md.account
	}
	md.monitoringURL = monitoringURL(useHTTPS, endpoint, md.accountID)
	return &Scaler{client: client, md: md, stream: &streamDetail{}}, nil
}

// Lag is one poll: the metric GetMetricsAndActivity reports, the
// consumer's pending plus unacknowledged messages.
func (s *Scaler) Lag(ctx context.Context) (int64, error) {
	if err := s.monitoringData(ctx, s.md.monitoringURL); err != nil {
		return 0, err
	}
	if s.stream == nil {
		return 0, errors.New("stream not found")
	}
	for _, c := range s.stream.Consumers {
		if c.Name == s.md.consumer {
			return int64(c.NumPending + c.NumAckPending), nil
		}
	}
	return 0, fmt.Errorf("consumer %q not found in stream %q", s.md.consumer, s.md.stream)
}

// monitoringData is getNATSJetstreamMonitoringData: read /jsz where the
// consumer's leader was last found (else at the endpoint); on a cluster,
// unless the leader is unchanged, walk the servers named by the endpoint's
// /varz to find the leader and read the consumer there.
func (s *Scaler) monitoringData(ctx context.Context, endpointURL string) error {
	cachedLeader := s.md.consumerLeader
	u := endpointURL
	if s.md.monitoringLeaderURL != "" {
		u = s.md.monitoringLeaderURL
	}
	resp, err := s.jsz(ctx, u)
	if err != nil {
		return err
	}
	found := s.set(resp, "")
	if cachedLeader != "" && !found {
		s.md.consumerLeader, s.md.monitoringLeaderURL, s.stream = "", "", nil
	}
	if found && cachedLeader != "" && cachedLeader == s.md.consumerLeader {
		return nil
	}
	if s.md.clusterSize <= 1 {
		return nil
	}

	varz, err := s.varz(ctx, s.serverURL(""))
	if err != nil {
		return err
	}
	advertised := true
	urls := varz.ConnectUrls
	if len(urls) == 0 {
		// no_advertise: the cluster's route URLs name the servers.
		advertised = false
		urls = append(urls, varz.Cluster.HostUrls...)
	}
	for _, clusterURL := range urls {
		var node, nodeURL string
		if advertised {
			host := strings.Split(clusterURL, ":")[0]
			info, err := s.varz(ctx, s.serverURL(host))
			if err != nil {
				return err
			}
			node = info.ServerName
			nodeURL = s.nodeURL(host)
		} else {
			// nova-nats-0.nova-nats-headless:6222 -> nova-nats-0, read at
			// nova-nats-0.<endpoint host>:<endpoint port>.
			node = strings.Split(clusterURL, ".")[0]
			nodeURL = s.nodeURLByNode(node)
		}
		resp, err := s.jsz(ctx, nodeURL)
		if err != nil {
			return err
		}
		for _, acc := range resp.Accounts {
			if !s.isAccount(acc) {
				continue
			}
			for _, st := range acc.Streams {
				if st.Name != s.md.stream {
					continue
				}
				for _, c := range st.Consumers {
					if c.Name == s.md.consumer && node == c.Cluster.Leader {
						s.set(resp, nodeURL)
						return nil
					}
				}
			}
		}
	}
	return fmt.Errorf("leader node not found for consumer %s", s.md.consumer)
}

// set is setNATSJetStreamMonitoringData: take the stream and the consumer's
// leader from a /jsz answer, and leaderURL as where to read next time.
func (s *Scaler) set(resp *jetStreamEndpointResponse, leaderURL string) bool {
	s.md.clusterSize = resp.MetaCluster.ClusterSize
	for _, acc := range resp.Accounts {
		if !s.isAccount(acc) {
			continue
		}
		for _, st := range acc.Streams {
			if st.Name != s.md.stream {
				continue
			}
			s.stream = st
			for _, c := range st.Consumers {
				if c.Name == s.md.consumer {
					s.md.consumerLeader = c.Cluster.Leader
					if leaderURL != "" {
						s.md.monitoringLeaderURL = leaderURL
					}
					return true
				}
			}
		}
	}
	return false
}

func (s *Scaler) isAccount(a accountDetail) bool {
	return a.ID == s.md.accountID || a.Name == s.md.account
}

// jsz is getNATSJetstreamMonitoringRequest. Like KEDA, it decodes whatever
// answers, whatever the status.
func (s *Scaler) jsz(ctx context.Context, u string) (*jetStreamEndpointResponse, error) {
	var resp *jetStreamEndpointResponse
	if err := s.get(ctx, u, &resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// varz is getNATSJetstreamServerInfo.
func (s *Scaler) varz(ctx context.Context, u string) (*jetStreamServerEndpointResponse, error) {
	var resp *jetStreamServerEndpointResponse
	if err := s.get(ctx, u, &resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func (s *Scaler) get(ctx context.Context, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("decode %s: %w", u, err)
	}
	return nil
}

// monitoringURL is getNATSJetStreamMonitoringURL.
func monitoringURL(useHTTPS bool, endpoint, id string) string {
	scheme := "http"
	if useHTTPS {
		scheme = "https"
	}
	params := url.Values{}
	params.Set("acc", id)
	params.Set("consumers", "true")
	params.Set("config", "true")
	u := url.URL{Scheme: scheme, Host: endpoint, Path: "/jsz", RawQuery: params.Encode()}
	return u.String()
}

// serverURL is getNATSJetStreamMonitoringServerURL: /varz at the endpoint,
// or at host with the endpoint's port.
func (s *Scaler) serverURL(host string) string {
	u, _ := url.Parse(s.md.monitoringURL) // built by monitoringURL
	h := u.Host
	if host != "" {
		h = host
		if port := u.Port(); port != "" {
			h = net.JoinHostPort(h, port)
		}
	}
	return fmt.Sprintf("%s://%s/varz", u.Scheme, h)
}

// nodeURL is getNATSJetStreamMonitoringNodeURL: /jsz at host with the
// endpoint's port.
func (s *Scaler) nodeURL(host string) string {
	u, _ := url.Parse(s.md.monitoringURL)
	if port := u.Port(); port != "" {
		host = net.JoinHostPort(host, port)
	}
	n := url.URL{Scheme: u.Scheme, Host: host, Path: u.Path, RawQuery: u.Query().Encode()}
	return n.String()
}

// nodeURLByNode is getNATSJetStreamMonitoringNodeURLByNode: /jsz at
// <node>.<endpoint host:port>, the DNS name of a StatefulSet's pod when the
// endpoint is the StatefulSet's headless service.
func (s *Scaler) nodeURLByNode(node string) string {
	u, _ := url.Parse(s.md.monitoringURL)
	n := url.URL{Scheme: u.Scheme, Host: fmt.Sprintf("%s.%s", node, u.Host), Path: u.Path, RawQuery: u.Query().Encode()}
	return n.String()
}
