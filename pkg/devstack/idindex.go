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
// collection grows. The embedded store therefore adds to each collection an
// index on the very expression FerretDB queries by (idPathExpr). FerretDB
// knows nothing of it: it does not list it and a dropped collection drops it.
const (
	idPathExpr   = `_ferretdb_sjson->'$._id'`
	idIndexTable = "_ferretdb_collections" // FerretDB's list of collection tables
	idIndexName  = "devstack_id_"          // + table name; FerretDB names its own <table name>_<index name>
	// idIndexEvery is how often a running store looks for new collections.
	// Until then a new collection's lookups scan, which costs nothing while
	// it is small.
	idIndexEvery = time.Second
)

// IndexIDs adds the _id index FerretDB's queries can use to every collection
// that lacks it, in every database. The store does this on start and then
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

// watchIDs indexes, every idIndexEvery until ctx ends, the database files
// written since it last looked: a collection is created by a write to its
// file (or to its write-ahead log), so a file whose size and time of change
// are those of the last look has no new collection. An idle store opens
// nothing.
func (m *Mongo) watchIDs(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(idIndexEvery)
	defer t.Stop()
	seen := map[string]fileStamp{}
	var (
		files  []string
		listed time.Time // the directory's time of change when files was listed
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A file created or removed changes the directory: it is listed
		// again only then.
		dir, err := os.Stat(m.dir)
		if err != nil || !dir.ModTime().Equal(listed) {
			if files, err = filepath.Glob(filepath.Join(m.dir, "*.sqlite")); err != nil {
				log.ErrorContext(ctx, "cannot index ids", slog.Any("err", err))
				listed = time.Time{}
				continue
			}
			if dir != nil {
				listed = dir.ModTime()
			}
		}
		now := make(map[string]fileStamp, len(files))
		for _, f := range files {
			stamp := stampOf(f)
			now[f] = stamp
			if last, ok := seen[f]; ok && last == stamp {
				continue
			}
			if err := indexIDs(ctx, f); err != nil && ctx.Err() == nil {
				log.ErrorContext(ctx, "cannot index ids", slog.String("file", filepath.Base(f)), slog.Any("err", err))
				delete(now, f) // looked at again next time
			}
		}
		seen = now
	}
}

// fileStamp is what changes when a database file is written: the size and
// time of change of the file and of its write-ahead log.
type fileStamp struct {
	size, walSize int64
	mod, walMod   time.Time
}

func stampOf(file string) fileStamp {
	var s fileStamp
	if fi, err := os.Stat(file); err == nil {
		s.size, s.mod = fi.Size(), fi.ModTime()
	}
	if fi, err := os.Stat(file + "-wal"); err == nil {
		s.walSize, s.walMod = fi.Size(), fi.ModTime()
	}
	return s
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

	missing, err := tablesWithoutIDIndex(ctx, db)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || isMissingDB(err) {
			return nil // dropped meanwhile, or FerretDB has not set it up yet
		}
		return err
	}
	for _, table := range missing {
		q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %q ON %q (%s)`, idIndexName+table, table, idPathExpr)
		if _, err := db.ExecContext(ctx, q); err != nil && !strings.Contains(err.Error(), "no such table") {
			return fmt.Errorf("index %s: %w", table, err) // a table dropped meanwhile is fine
		}
	}
	return nil
}

// tablesWithoutIDIndex lists FerretDB's collection tables with no index on
// idPathExpr (by expression, so a renamed collection keeps its own).
func tablesWithoutIDIndex(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, fmt.Sprintf(`
		SELECT c.table_name FROM %q c
		WHERE NOT EXISTS (
			SELECT 1 FROM sqlite_master m
			WHERE m.type = 'index' AND m.tbl_name = c.table_name AND instr(m.sql, ?) > 0
		)`, idIndexTable), idPathExpr)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		tables = append(tables, t)
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
