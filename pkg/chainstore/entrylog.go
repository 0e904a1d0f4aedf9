package chainstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// An entry log is a list of documents of one collection under one key: its
// n-th entry has _id "<key>#<n>". Positions are taken from 1 up without
// gaps, each by an insert that fails if another writer took it first, so
// that a reader finds a log's entries by reading 1, 2, ... up to the first
// that does not exist: by _id alone. An entry is never updated: FerretDB
// 1.24 applies an update by reading the document and writing it back
// outside a transaction, so two writers updating one document at once lose
// one's change (8 writers setting 400 keys of one document with $set kept
// about a quarter), where the insert of an _id is atomic.
// IndexCollection and ListingCollection hold entry logs.

func entryID(key string, n int) string { return key + "#" + strconv.Itoa(n) }

// positions remembers per log the next free position this process
// expects, so that appending usually takes one insert. It forgets a random
// log when full.
type positions struct {
	mu   sync.Mutex
	next map[string]int
}

const maxPositions = 4096

func (p *positions) get(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next[key]
}

func (p *positions) set(key string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next == nil {
		p.next = map[string]int{}
	}
	if _, ok := p.next[key]; !ok && len(p.next) >= maxPositions {
		for k := range p.next {
			delete(p.next, k)
			break
		}
	}
	p.next[key] = max(n, p.next[key])
}

// forget drops what p remembers of the log key (deleted).
func (p *positions) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.next, key)
}

// appendEntry inserts entry(id) as the next entry of the log key of coll,
// at the position pos expects, else at the first free one, and tells the
// position.
func appendEntry(ctx context.Context, coll *mongo.Collection, pos *positions, key string, entry func(id string) any) (int, error) {
	n := max(pos.get(key), 1)
	for searched := false; ; {
		_, err := coll.InsertOne(ctx, entry(entryID(key, n)))
		if err == nil {
			pos.set(key, n+1)
			return n, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return 0, err
		}
		if searched {
			n++ // taken since the search: the next one is free unless taken too
			continue
		}
		if n, err = firstFree(ctx, coll, key, n); err != nil {
			return 0, err
		}
		searched = true
	}
}

// firstFree finds the first free position of a log, knowing that taken is
// taken: positions are taken without gaps, so it doubles past taken until
// a free one, then bisects.
func firstFree(ctx context.Context, coll *mongo.Collection, key string, taken int) (int, error) {
	lo, hi := taken, 2*taken
	for {
		ok, err := entryTaken(ctx, coll, key, hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := entryTaken(ctx, coll, key, mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

// entryTaken tells whether the log key of coll has an entry at position n.
func entryTaken(ctx context.Context, coll *mongo.Collection, key string, n int) (bool, error) {
	err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: entryID(key, n)}}).Err()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return false, nil
	}
	return false, fmt.Errorf("read %s %s: %w", coll.Name(), entryID(key, n), err)
}

// readEntries reads the entries of the log key of coll, in order, and
// tells its first free position.
func readEntries[T any](ctx context.Context, coll *mongo.Collection, key string) ([]T, int, error) {
	var entries []T
	for n := 1; ; n++ {
		var e T
		err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: entryID(key, n)}}).Decode(&e)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return entries, n, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read %s %s: %w", coll.Name(), entryID(key, n), err)
		}
		entries = append(entries, e)
	}
}
