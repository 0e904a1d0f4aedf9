package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// capture keeps the first max bytes of a stream and counts the rest. It never
// blocks or fails, so a chatty program is never slowed down by its reader.
type capture struct {
	max     int64
	buf     bytes.Buffer
	dropped int64
	lines   *protocolScanner // optional
	// stop is called once when more than stopAt bytes were written (stopAt > 0).
	stopAt int64
	stop   func()
}

func (c *capture) Write(p []byte) (int, error) {
	if c.lines != nil {
		c.lines.scan(p)
	}
	if c.stopAt > 0 && int64(c.buf.Len())+c.dropped+int64(len(p)) > c.stopAt && c.stop != nil {
		c.stop()
		c.stop = nil
	}
	keep := int64(len(p))
	if room := c.max - int64(c.buf.Len()); keep > room {
		keep = max(room, 0)
	}
	c.buf.Write(p[:keep])
	c.dropped += int64(len(p)) - keep
	return len(p), nil
}

// protocolMessage is the original NOVA protocol: the code prints one JSON object
// line such as {"status": "success", "context_updates": {...}, "message": "..."}.
type protocolMessage struct {
	Status         string
	ContextUpdates map[string]json.RawMessage
	Message        string
}

// protocolScanner watches a stream line by line and remembers the last line that is
// a protocol message. Lines that cannot be one are skipped without being buffered.
type protocolScanner struct {
	maxLine int
	line    []byte
	started bool // the line's first non-blank byte was '{'
	skip    bool // the line cannot be a protocol message
	last    *protocolMessage
}

func (s *protocolScanner) scan(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.feed(p)
			return
		}
		s.feed(p[:i])
		s.endLine()
		p = p[i+1:]
	}
}

func (s *protocolScanner) feed(seg []byte) {
	if s.skip {
		return
	}
	if !s.started {
		seg = bytes.TrimLeft(seg, " \t\r")
		if len(seg) == 0 {
			return
		}
		if seg[0] != '{' {
			s.skip = true
			return
		}
		s.started = true
	}
	if len(s.line)+len(seg) > s.maxLine {
		s.skip = true
		s.line = nil
		return
	}
	s.line = append(s.line, seg...)
}

// endLine must also be called once at the end of the stream: the last line may
// have no newline.
func (s *protocolScanner) endLine() {
	if s.started && !s.skip {
		if m, ok := parseProtocolLine(s.line); ok {
			s.last = m
		}
	}
	if cap(s.line) > 64<<10 {
		s.line = nil // do not hold on to a multi-MiB buffer
	}
	s.line, s.started, s.skip = s.line[:0], false, false
}

func parseProtocolLine(line []byte) (*protocolMessage, bool) {
	if !bytes.Contains(line, []byte(`"status"`)) && !bytes.Contains(line, []byte(`"context_updates"`)) {
		return nil, false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return nil, false
	}
	m := &protocolMessage{}
	rawStatus, hasStatus := fields["status"]
	if hasStatus && json.Unmarshal(rawStatus, &m.Status) != nil {
		return nil, false
	}
	rawUpdates, hasUpdates := fields["context_updates"]
	if hasUpdates {
		if err := json.Unmarshal(rawUpdates, &m.ContextUpdates); err != nil {
			return nil, false
		}
	}
	// A bare {"status": ...} line is only ours with a status we know, so that
	// printing an unrelated record (an HTTP response, say) is not taken as a verdict.
	if !hasUpdates && m.Status != "success" && m.Status != "error" {
		return nil, false
	}
	if raw, ok := fields["message"]; ok {
		if json.Unmarshal(raw, &m.Message) != nil {
			m.Message = string(raw)
		}
	}
	return m, true
}

var errTrailingData = errors.New("trailing data after JSON value")

// DecodeJSON decodes one JSON value, a runner's report say, keeping numbers as
// json.Number so that integers beyond 2^53 survive (see Result.Updates).
func DecodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errTrailingData
	}
	return nil
}

// readBufferSize is what one read of a job's pipe takes at most: a pipe's
// capacity.
const readBufferSize = 64 << 10

// readBuffers lend the buffers a job's pipes are read with. Made for each
// run, three or more of them (192 KiB, zeroed) were a quarter of the bytes
// nova dev allocated under load, and so of its garbage collections.
var readBuffers = sync.Pool{New: func() any { return new([readBufferSize]byte) }}

// copyTo feeds a capture until r ends.
func copyTo(c *capture, r io.Reader) {
	buf := readBuffers.Get().(*[readBufferSize]byte)
	defer readBuffers.Put(buf)
	copyWith(c, r, buf[:])
}

func copyWith(c *capture, r io.Reader, buf []byte) {
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = c.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// drainTo feeds a capture until f ends or its read deadline passes; then it
// takes, without waiting, whatever the pipe still holds.
func drainTo(c *capture, f *os.File) {
	buf := readBuffers.Get().(*[readBufferSize]byte)
	defer readBuffers.Put(buf)
	copyWith(c, f, buf[:])
	// A passed deadline fails RawConn.Read before it calls the function
	// below: clear it. The function never waits, so nothing blocks.
	_ = f.SetReadDeadline(time.Time{})
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		_ = rc.Read(func(fd uintptr) bool {
			n, _ = unix.Read(int(fd), buf[:])
			return true // never wait
		})
		if n <= 0 {
			return
		}
		_, _ = c.Write(buf[:n])
	}
}
