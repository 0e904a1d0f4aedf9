package devstack_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
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
		return strings.Contains(plan, "USING INDEX devstack_uid_")
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

// idIndexes names the indexes of collection coll of database db in the
// store under dataDir, as SQLite has them.
func idIndexes(ctx context.Context, t *testing.T, dataDir, db, coll string) []string {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, "ferretdb", db+".sqlite")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	rows, err := sdb.QueryContext(ctx, `
		SELECT m.name FROM sqlite_master m JOIN _ferretdb_collections c ON m.tbl_name = c.table_name
		WHERE m.type = 'index' AND c.name = ? ORDER BY m.name`, coll)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// The store's _id index takes the place of FerretDB's: a collection keeps one
// _id index, a unique one, and a second document with the same _id is still
// refused as a duplicate key. A data dir of an earlier version (the same
// index, not unique, beside FerretDB's) is brought to that at the start.
func TestMongoOneUniqueIDIndex(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir, NoIDIndex: true})
	if err != nil {
		t.Fatalf("StartMongo: %v", err)
	}
	coll := connect(t, m.URI()).Database("d").Collection("c")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}}); err != nil {
		t.Fatal(err)
	}
	ferret := idIndexes(ctx, t, dir, "d", "c")
	if len(ferret) != 1 || !strings.HasSuffix(ferret[0], "__id_") {
		t.Fatalf("FerretDB's indexes of a new collection = %q, want its _id index alone", ferret)
	}
	_ = coll.Database().Client().Disconnect(ctx)
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// An earlier version's index, not unique.
	sdb, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "ferretdb", "d.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	table := strings.TrimSuffix(ferret[0], "__id_")
	_, err = sdb.ExecContext(ctx, fmt.Sprintf(`CREATE INDEX "devstack_id_%s" ON %q (_ferretdb_sjson->'$._id')`, table, table))
	_ = sdb.Close()
	if err != nil {
		t.Fatal(err)
	}

	m, err = devstack.StartMongo(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if got, want := idIndexes(ctx, t, dir, "d", "c"), []string{"devstack_uid_" + table}; !slices.Equal(got, want) {
		t.Errorf("indexes after the start = %q, want %q", got, want)
	}
	coll = connect(t, m.URI()).Database("d").Collection("c")
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}, {Key: "again", Value: true}})
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("insert of an existing _id: %v, want a duplicate key error", err)
	}
	res, err := coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "y"}}, bson.D{{Key: "_id", Value: "x"}}, bson.D{{Key: "_id", Value: "z"}}},
		options.InsertMany().SetOrdered(false))
	var bulk mongo.BulkWriteException
	if !errors.As(err, &bulk) || len(bulk.WriteErrors) != 1 || bulk.WriteErrors[0].Index != 1 || bulk.WriteErrors[0].Code != 11000 {
		t.Errorf("unordered insert of y, x, z: %v (%v), want x alone refused as a duplicate key", err, res)
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 3 {
		t.Errorf("documents = %d (%v), want x, y and z", n, err)
	}

	// A collection created while the store runs gets the same within seconds.
	other := coll.Database().Collection("other")
	if _, err := other.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := idIndexes(ctx, t, dir, "d", "other")
		if len(got) == 1 && strings.HasPrefix(got[0], "devstack_uid_") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("indexes of a new collection after 10s = %q, want the store's unique _id index alone", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := other.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}}); !mongo.IsDuplicateKeyError(err) {
		t.Errorf("insert of an existing _id into the new collection: %v, want a duplicate key error", err)
	}
}
