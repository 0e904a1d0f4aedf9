package devstack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/novaflow/nova/pkg/devstack"
)

// idPlan is SQLite's plan for the statement FerretDB runs to find the
// document with _id id in coll, as FerretDB's explain reports it.
func idPlan(ctx context.Context, coll *mongo.Collection, id string) (string, error) {
	// SQLite plans an EXPLAIN with the schema its connection last read, and
	// only a statement that runs reads it again: find first, so that the
	// connection knows of an index created by another one.
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Err(); err != nil {
		return "", err
	}
	var res struct {
		QueryPlanner struct {
			Plan []string `bson:"Plan"`
		} `bson:"queryPlanner"`
		FilterPushdown bool `bson:"filterPushdown"`
	}
	err := coll.Database().RunCommand(ctx, bson.D{{Key: "explain", Value: bson.D{
		{Key: "find", Value: coll.Name()}, {Key: "filter", Value: bson.D{{Key: "_id", Value: id}}},
	}}}).Decode(&res)
	if err != nil {
		return "", err
	}
	if !res.FilterPushdown {
		return "", fmt.Errorf("filter by _id not pushed down")
	}
	return strings.Join(res.QueryPlanner.Plan, "; "), nil
}

func connect(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

// Without the index, FerretDB's own unique _id index is of no use to its
// lookups by _id: they scan. If this ever fails, FerretDB has fixed that and
// IndexIDs can go.
func TestMongoWithoutIDIndexScans(t *testing.T) {
	ctx := testContext(t)
	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: t.TempDir(), NoIDIndex: true})
	if err != nil {
		t.Fatalf("StartMongo: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() }) // after the client's disconnect
	coll := connect(t, m.URI()).Database("d").Collection("c")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}}); err != nil {
		t.Fatal(err)
	}
	plan, err := idPlan(ctx, coll, "x")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "SCAN") || strings.Contains(plan, "INDEX") {
		t.Errorf("plan without the id index = %q, want a scan", plan)
	}
}

// A collection created while the store runs is indexed within seconds, and
// one that exists when it starts is indexed before it accepts a client.
func TestMongoIndexesIDs(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatalf("StartMongo: %v", err)
	}
	client := connect(t, m.URI())
	colls := []*mongo.Collection{
		client.Database("d").Collection("c"),
		client.Database("d").Collection("other"),
		client.Database("e").Collection("c"),
	}
	for _, c := range colls {
		if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	indexed := func(c *mongo.Collection) bool {
		t.Helper()
		plan, err := idPlan(ctx, c, "x")
		if err != nil {
			t.Fatalf("explain %s: %v", c.Name(), err)
		}
		return strings.Contains(plan, "USING INDEX devstack_id_")
	}
	for _, c := range colls {
		deadline := time.Now().Add(10 * time.Second)
		for !indexed(c) {
			if time.Now().After(deadline) {
				t.Fatalf("%s.%s not indexed by _id after 10s", c.Database().Name(), c.Name())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	_ = client.Disconnect(ctx)
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// A data dir written without the index gets it at the next start.
	plain := t.TempDir()
	m, err = devstack.StartMongo(ctx, devstack.Options{DataDir: plain, NoIDIndex: true})
	if err != nil {
		t.Fatalf("StartMongo: %v", err)
	}
	client = connect(t, m.URI())
	if _, err := client.Database("d").Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}}); err != nil {
		t.Fatal(err)
	}
	_ = client.Disconnect(ctx)
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	m, err = devstack.StartMongo(ctx, devstack.Options{DataDir: plain})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if c := connect(t, m.URI()).Database("d").Collection("c"); !indexed(c) {
		t.Errorf("collection of an existing data dir not indexed by _id at start")
	}
}
