package devstack

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	// The SQLite driver FerretDB itself uses, registered as "sqlite".
	_ "modernc.org/sqlite"
)

// FerretDB v1.24 on SQLite keeps each collection as a table of JSON documents
// and finds a document by _id with WHERE _ferretdb_sjson->'$._id' = ?, the
// only filter it pushes down to SQL (updates, replaces, deletes and finds
// alike). The unique index it creates for _id is on _ferretdb_sjson->"_id",
// an expression that extracts the same value but that SQLite's planner does
// not take for the same, so every one of those statements scans the table,
// parsing each document, and reads and writes by _id slow down as the
// collection grows. The embedded store therefore gives each collection a
// unique index on the very expression FerretDB queries by (idPathExpr) and
// drops FerretDB's own: the two hold the same value for every document (the
// _id member's JSON), so the new one keeps _id unique (a duplicate fails with
// SQLITE_CONSTRAINT_UNIQUE, which FerretDB answers as a duplicate key, E11000)
// and every insert writes one _id index rather than two, each entry computed
// by parsing the document's JSON. Ids chosen by producers (random UUIDs) land
// anywhere in such an index, so as a collection grows each insert dirties a
// page of each _id index that its commit and the next checkpoint write out.
// FerretDB knows nothing of the change: it lists its _id_ index as before
// (its uniqueness holds; collStats, which NOVA does not use, finds no size
// for it), it never creates an index it lists again, and a dropped
// collection drops the new index with its table.
const (
	idPathExpr     = `_ferretdb_sjson->'$._id'`
	idIndexTable   = "_ferretdb_collections" // FerretDB's list of collection tables
	idIndexName    = "devstack_uid_"         // + table name; unique
	oldIDIndexName = "devstack_id_"          // + table name: the same index, not unique, of earlier data dirs
	ferretIDIndex  = "__id_"                 // table name + this: FerretDB's (<table name>_<index name>)
	// idIndexEvery is how often a running store looks for new collections.
	// Until then a new collection's lookups scan, which costs nothing while
	// it is small.
	idIndexEvery = time.Second
)

// IndexIDs gives every collection of every database the unique _id index
// FerretDB's queries can use, in place of FerretDB's own. The store does this on start and then
// on its own within a second of a collection's creation; calling it makes it
// happen now. Options.NoIDIndex turns both off.
func (m *Mongo) IndexIDs(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(m.dir, "*.sqlite"))
	if err != nil {
		return fmt.Errorf("index ids: %w", err)
	}
	var errs []error
	for _, f := range files {
		if err := indexIDs(ctx, f); err != nil {
			errs = append(errs, fmt.Errorf("index ids of %s: %w", filepath.Base(f), err))
		}
	}
	return errors.Join(errs...)
}

// watchIDs runs IndexIDs every idIndexEvery until ctx ends.
func (m *Mongo) watchIDs(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(idIndexEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := m.IndexIDs(ctx); err != nil && ctx.Err() == nil {
				log.ErrorContext(ctx, "cannot index ids", slog.Any("err", err))
			}
		}
	}
}

// indexIDs indexes the collections of one database file.
func indexIDs(ctx context.Context, file string) error {
	// mode=rw: a database FerretDB dropped since the glob is not created again.
	db, err := sql.Open("sqlite", (&url.URL{
		Scheme: "file", Path: file, OmitHost: true,
		RawQuery: "mode=rw&_pragma=busy_timeout(10000)",
	}).String())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)

	tables, err := idIndexesToFix(ctx, db)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || isMissingDB(err) {
			return nil // dropped meanwhile, or FerretDB has not set it up yet
		}
		return err
	}
	for _, t := range tables {
		// The unique index first: _id stays unique throughout.
		stmts := []string{fmt.Sprintf(`CREATE UNIQUE INDEX IF NOT EXISTS %q ON %q (%s)`, idIndexName+t.name, t.name, idPathExpr)}
		for _, ix := range t.drop {
			stmts = append(stmts, fmt.Sprintf(`DROP INDEX IF EXISTS %q`, ix))
		}
		for _, q := range stmts {
			if _, err := db.ExecContext(ctx, q); err != nil {
				if strings.Contains(err.Error(), "no such table") {
					break // a table dropped meanwhile is fine
				}
				return fmt.Errorf("index %s: %w", t.name, err)
			}
		}
	}
	return nil
}

// tableIDIndexes is a collection table whose _id indexes are not yet as
// IndexIDs leaves them: the unique index on idPathExpr is missing or other
// _id indexes are left to drop.
type tableIDIndexes struct {
	name string
	drop []string
}

// idIndexesToFix lists FerretDB's collection tables that lack a unique index
// on idPathExpr (found by expression, so a renamed collection keeps its own)
// or still have FerretDB's _id index or the earlier, not unique one.
func idIndexesToFix(ctx context.Context, db *sql.DB) ([]tableIDIndexes, error) {
	rows, err := db.QueryContext(ctx, fmt.Sprintf(`
		SELECT c.table_name,
			EXISTS (
				SELECT 1 FROM sqlite_master m
				WHERE m.type = 'index' AND m.tbl_name = c.table_name
					AND m.sql LIKE 'CREATE UNIQUE INDEX %%' AND instr(m.sql, ?) > 0
			),
			(SELECT group_concat(m.name, char(10)) FROM sqlite_master m
				WHERE m.type = 'index' AND m.tbl_name = c.table_name
					AND m.name IN (c.table_name || ?, ? || c.table_name))
		FROM %q c`, idIndexTable), idPathExpr, ferretIDIndex, oldIDIndexName)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tables []tableIDIndexes
	for rows.Next() {
		var (
			t      tableIDIndexes
			unique bool
			drop   sql.NullString
		)
		if err := rows.Scan(&t.name, &unique, &drop); err != nil {
			return nil, err
		}
		if drop.Valid {
			t.drop = strings.Split(drop.String, "\n")
		}
		if !unique || len(t.drop) > 0 {
			tables = append(tables, t)
		}
	}
	return tables, rows.Err()
}

// isMissingDB tells an error of a database file that is gone or not yet
// FerretDB's: opened read-write without create, or without its list of
// collections.
func isMissingDB(err error) bool {
	s := err.Error()
	return strings.Contains(s, "unable to open database file") || strings.Contains(s, "no such table: "+idIndexTable)
}
