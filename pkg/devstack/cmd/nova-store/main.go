// Command nova-store serves the store nova dev embeds, FerretDB on SQLite
// speaking the MongoDB wire protocol, as a process of its own: the local
// stand-in for mongo:7.0 that `make base-images` builds where that image
// cannot be pulled (deploy/images/images.sh).
//
//	nova-store [-listen 0.0.0.0:27017] [-data /data/db]
//	nova-store ping [-uri mongodb://127.0.0.1:27017/]
//
// ping connects and sends the MongoDB ping command, exiting 0 when it is
// answered: a container's health check.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/novaflow/nova/pkg/devstack"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "ping" {
		os.Exit(ping(os.Args[2:]))
	}
	os.Exit(serve(os.Args[1:]))
}

func serve(args []string) int {
	fs := flag.NewFlagSet("nova-store", flag.ExitOnError)
	listen := fs.String("listen", "0.0.0.0:27017", "`HOST:PORT` to serve the MongoDB wire protocol on")
	data := fs.String("data", "/data/db", "data `DIR` (SQLite files in DIR/ferretdb)")
	_ = fs.Parse(args)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	host, portText, err := net.SplitHostPort(*listen)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || port < 0 || port > 65535 {
		fmt.Fprintf(os.Stderr, "nova-store: -listen %q: want HOST:PORT\n", *listen)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: *data, MongoHost: host, MongoPort: port, Logger: log})
	if err != nil {
		log.Error("nova-store: start", "err", err)
		return 1
	}
	log.Info("nova-store: serving the MongoDB wire protocol (FerretDB on SQLite)", "listen", *listen, "data", *data)
	<-ctx.Done()
	if err := m.Close(); err != nil {
		log.Error("nova-store: stop", "err", err)
		return 1
	}
	log.Info("nova-store: stopped")
	return 0
}

func ping(args []string) int {
	fs := flag.NewFlagSet("nova-store ping", flag.ExitOnError)
	uri := fs.String("uri", "mongodb://127.0.0.1:27017/", "the store's connection string")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	_ = fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(*uri).SetServerSelectionTimeout(*timeout))
	if err == nil {
		err = client.Ping(ctx, nil)
		_ = client.Disconnect(context.WithoutCancel(ctx))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nova-store ping %s: %v\n", *uri, err)
		return 1
	}
	return 0
}
