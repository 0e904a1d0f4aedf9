package devstack_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/goleak"

	"github.com/novaflow/nova/pkg/devstack"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// A clustered nats-server can leave a stream's file store (its flush
		// loop and the access-time ticker it registers) open after Shutdown.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	)
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStartServesJetStreamAndMongo(t *testing.T) {
	ctx := testContext(t)
	logs := &recordingHandler{}
	stack, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir(), Logger: slog.New(logs)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		if err := stack.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()

	t.Run("jetstream publish and consume", func(t *testing.T) {
		nc, err := nats.Connect(stack.NATSURL)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVT", Subjects: []string{"evt.>"}, Storage: jetstream.FileStorage})
		if err != nil {
			t.Fatalf("create stream: %v", err)
		}
		if _, err := js.Publish(ctx, "evt.hello", []byte("world")); err != nil {
			t.Fatalf("publish: %v", err)
		}
		cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "reader", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatalf("create consumer: %v", err)
		}
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if got := string(msg.Data()); got != "world" || msg.Subject() != "evt.hello" {
			t.Errorf("got %q on %q, want %q on evt.hello", got, msg.Subject(), "world")
		}
		if err := msg.DoubleAck(ctx); err != nil {
			t.Errorf("ack: %v", err)
		}
	})

	t.Run("mongo insert and find", func(t *testing.T) {
		client, err := mongo.Connect(options.Client().ApplyURI(stack.MongoURI))
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer func() { _ = client.Disconnect(context.WithoutCancel(ctx)) }()

		coll := client.Database("devstack").Collection("things")
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 42}}); err != nil {
			t.Fatalf("insert: %v", err)
		}
		var got struct {
			ID string `bson:"_id"`
			N  int    `bson:"n"`
		}
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got); err != nil {
			t.Fatalf("find: %v", err)
		}
		if got.ID != "a" || got.N != 42 {
			t.Errorf("got %+v, want {a 42}", got)
		}
	})

	if r, ok := logs.below(slog.LevelWarn); ok {
		t.Errorf("logger received %v record %q; want warn and above only", r.Level, r.Message)
	}
}

// startNATS starts a server on a fresh port storing in dir.
func startNATS(ctx context.Context, t *testing.T, dir string) *devstack.NATS {
	t.Helper()
	n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatalf("StartNATS: %v", err)
	}
	return n
}

func TestNATSRestartKeepsStream(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()

	first := startNATS(ctx, t, dir)
	port := first.Port()
	func() {
		defer first.Shutdown()
		nc, err := nats.Connect(first.URL())
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}}); err != nil {
			t.Fatalf("create stream: %v", err)
		}
		for _, s := range []string{"one", "two", "three"} {
			if _, err := js.Publish(ctx, "keep."+s, []byte(s)); err != nil {
				t.Fatalf("publish: %v", err)
			}
		}
	}()

	second, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dir, NATSPort: port})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer second.Shutdown()
	if second.URL() != first.URL() {
		t.Errorf("restart on port %d: URL %q, want %q", port, second.URL(), first.URL())
	}

	nc, err := nats.Connect(second.URL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "KEEP")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 {
		t.Errorf("messages after restart = %d, want 3", info.State.Msgs)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, "keep.three")
	if err != nil {
		t.Fatalf("get message: %v", err)
	}
	if string(msg.Data) != "three" {
		t.Errorf("last message = %q, want %q", msg.Data, "three")
	}
}

func TestMongoRestartKeepsDocuments(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()

	write := func(uri string) error {
		client, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			return err
		}
		defer func() { _ = client.Disconnect(context.WithoutCancel(ctx)) }()
		_, err = client.Database("devstack").Collection("kept").InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}})
		return err
	}
	count := func(uri string) (int64, error) {
		client, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			return 0, err
		}
		defer func() { _ = client.Disconnect(context.WithoutCancel(ctx)) }()
		return client.Database("devstack").Collection("kept").CountDocuments(ctx, bson.D{})
	}

	first, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatalf("StartMongo: %v", err)
	}
	err = write(first.URI())
	if cerr := first.Close(); cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	if err != nil {
		t.Fatalf("insert: %v", err)
	}

	second, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer second.Close()
	n, err := count(second.URI())
	if err != nil {
		t.Fatalf("count: %v", err)
	}
	if n != 1 {
		t.Errorf("documents after restart = %d, want 1", n)
	}
}

func TestStartRequiresDataDir(t *testing.T) {
	ctx := testContext(t)
	tests := []struct {
		name  string
		start func() error
	}{
		{"Start", func() error { _, err := devstack.Start(ctx, devstack.Options{}); return err }},
		{"StartNATS", func() error { _, err := devstack.StartNATS(ctx, devstack.Options{}); return err }},
		{"StartMongo", func() error { _, err := devstack.StartMongo(ctx, devstack.Options{}); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.start(); !errors.Is(err, devstack.ErrNoDataDir) {
				t.Errorf("err = %v, want ErrNoDataDir", err)
			}
		})
	}
}

// recordingHandler accepts every level and remembers what it was given, to prove the
// stack filters its components' logs itself.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}

func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordingHandler) below(level slog.Level) (slog.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Level < level {
			return r, true
		}
	}
	return slog.Record{}, false
}

// TestNATSDialer: a client of the same process reaches the server through a
// pipe while it runs, keeps working over it, and once the server is replaced
// by a new one on the same port reconnects over TCP.
func TestNATSDialer(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	first := startNATS(ctx, t, dir)
	port := first.Port()
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(first.URL(), nats.SetCustomDialer(first.Dialer()), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		first.Shutdown()
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	if got := nc.ConnectedAddr(); got != "pipe" {
		t.Errorf("connected to %q while the server runs in this process, want pipe", got)
	}
	roundTrip := func() {
		t.Helper()
		sub, err := nc.SubscribeSync("dial.echo")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := nc.Publish("dial.echo", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		msg, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("message back: %v", err)
		}
		if string(msg.Data) != "hello" {
			t.Errorf("got %q, want hello", msg.Data)
		}
	}
	roundTrip()

	first.Shutdown()
	second, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dir, NATSPort: port})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer second.Shutdown()
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnection to the restarted server within 10 s")
	}
	if got, want := nc.ConnectedAddr(), second.URL()[len("nats://"):]; got != want {
		t.Errorf("after the restart connected to %q, want %s over TCP", got, want)
	}
	roundTrip()
}

// The embedded server syncs its streams every NATSSyncInterval, by
// default DefaultNATSSyncInterval rather than the server's 2 minutes (see
// cmd/restartbench for what it does to a restart after kill -9).
func TestNATSSyncInterval(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, tc := range []struct{ set, want time.Duration }{
		{0, devstack.DefaultNATSSyncInterval},
		{3 * time.Second, 3 * time.Second},
	} {
		n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: t.TempDir(), NATSSyncInterval: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		got := n.Server().JetStreamConfig().SyncInterval
		n.Shutdown()
		if got != tc.want {
			t.Errorf("NATSSyncInterval %v: the server syncs every %v, want %v", tc.set, got, tc.want)
		}
	}
}
