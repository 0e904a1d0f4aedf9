package runner

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/novaflow/nova/pkg/jsonvalue"
)

// WriteContext writes a Request's context to a new file at path as JSON, as
// the runtimes' runners load it.
func WriteContext(path string, values jsonvalue.Object) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write context: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("write context: %w", cerr)
		}
	}()
	return encodeContext(f, values)
}

// encodeContext writes the context to w as JSON, its values as their exact
// text; a nil context is {}.
func encodeContext(w io.Writer, values jsonvalue.Object) error {
	if _, err := w.Write(append(values.Bytes(), '\n')); err != nil {
		return fmt.Errorf("write context: %w", err)
	}
	return nil
}

// boundedBuffer reads a stream to its end, keeping at most max bytes.
type boundedBuffer struct {
	max      int64
	buf      []byte
	overflow bool
	// complete, when set, is called once the stream has carried a newline: the
	// runner's report is complete (a JSON report has no other newline).
	complete func()
}

func (b *boundedBuffer) readFrom(r io.Reader) {
	buf := readBuffers.Get().(*[readBufferSize]byte)
	defer readBuffers.Put(buf)
	chunk := buf[:]
	for {
		n, err := r.Read(chunk)
		if n > 0 && b.complete != nil && bytes.IndexByte(chunk[:n], '\n') >= 0 {
			b.complete()
			b.complete = nil
		}
		if n > 0 {
			if int64(len(b.buf)+n) > b.max {
				b.overflow, b.buf = true, nil
			}
			if !b.overflow {
				b.buf = append(b.buf, chunk[:n]...)
			}
		}
		if err != nil {
			return
		}
	}
}
