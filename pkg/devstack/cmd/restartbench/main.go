// Command restartbench measures how long the embedded NATS server of nova
// dev takes to restart after a kill -9 with many ended executions' states
// in the executions bucket, each kept with its own TTL as the engine keeps
// it, at the server's default sync interval (the baseline) and at nova
// dev's (devstack.DefaultNATSSyncInterval), in the same run:
//
//	go run ./pkg/devstack/cmd/restartbench -states 10000,100000
//
// Each case fills a fresh data dir in a child process (three writes an
// execution: running, running, ended with a week's TTL), lets it run on
// for -after, kills it with SIGKILL, and times a restart until the
// server is ready and the bucket answers a read.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "fill" {
		fill()
		return
	}
	states := flag.String("states", "10000,100000", "numbers of ended executions to restart with")
	after := flag.Duration("after", 25*time.Second, "how long the filled server runs on before the kill")
	flag.Parse()
	fmt.Printf("restart after kill -9, the server running %v after the last write (median of 3)\n", *after)
	fmt.Printf("%-10s %-22s %-22s\n", "states", "sync 2m (server default)", fmt.Sprintf("sync %v (nova dev)", devstack.DefaultNATSSyncInterval))
	for _, f := range strings.Split(*states, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%-10d %-22v %-22v\n", n, median(n, 2*time.Minute, *after), median(n, devstack.DefaultNATSSyncInterval, *after))
	}
}

// median restarts three times after a kill -9 of a server filled with n
// states, syncing every sync, and returns the median restart time.
func median(n int, sync, after time.Duration) time.Duration {
	var ts []time.Duration
	for range 3 {
		dir, err := os.MkdirTemp("", "restartbench-")
		if err != nil {
			fail(err)
		}
		cmd := exec.Command(os.Args[0], "fill", dir, strconv.Itoa(n), sync.String(), after.String())
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err == nil || !strings.Contains(err.Error(), "killed") {
			fail(fmt.Errorf("the filling server was to be killed: %v", err))
		}
		ts = append(ts, restart(dir, sync, n))
		_ = os.RemoveAll(dir)
	}
	slices.Sort(ts)
	return ts[1].Round(time.Millisecond)
}

// restart starts the server of dir and returns how long until the bucket
// answers a read of its first key.
func restart(dir string, sync time.Duration, n int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	srv, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dir, NATSSyncInterval: sync})
	if err != nil {
		fail(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fail(err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketExecutions)
	if err == nil {
		_, err = kv.Get(ctx, key(0))
	}
	took := time.Since(start)
	if err != nil {
		fail(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.Values() != uint64(n) {
		fail(fmt.Errorf("after the restart the bucket holds %v values (%v), want %d", st, err, n))
	}
	return took
}

// fill is the child: it fills dir with n ended executions' states, runs on
// for after and kills itself.
func fill() {
	dir, after := os.Args[2], os.Args[5]
	n, _ := strconv.Atoi(os.Args[3])
	sync, _ := time.ParseDuration(os.Args[4])
	wait, _ := time.ParseDuration(after)
	ctx := context.Background()
	srv, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dir, NATSSyncInterval: sync})
	if err != nil {
		fail(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		fail(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		fail(err)
	}
	// The bucket as the engine declares it (engine.New).
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketExecutions, History: 1,
		Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second}); err != nil {
		fail(err)
	}
	state := []byte(strings.Repeat("s", 1500)) // an ended 3-node execution's state is 1-2 KB
	for i := range n {
		for w := range 3 {
			m := nats.NewMsg("$KV." + bus.BucketExecutions + "." + key(i))
			m.Data = state
			if w == 2 {
				m.Header.Set(jetstream.MsgTTLHeader, "604800s") // ended: kept a week
			}
			if _, err := js.PublishMsgAsync(m); err != nil {
				fail(err)
			}
		}
		if i%1000 == 999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	time.Sleep(wait)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

func key(i int) string { return fmt.Sprintf("exec-%08d", i) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "restartbench:", err)
	os.Exit(1)
}
