package runner

import (
	"os"
	"testing"
	"time"
)

// When a job is done, supervise sets its pipes' read deadline to now so
// that drainTo stops waiting; what the pipe holds by then is still the
// job's output and must be taken, though a writer may still hold the pipe
// open (a killed process not yet torn down).
func TestDrainToTakesWhatThePipeHoldsAfterTheDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := w.Write([]byte("the last line\n")); err != nil {
		t.Fatal(err)
	}
	if err := r.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	c := &capture{max: 4}
	drainTo(c, r)
	if c.buf.String() != "the " || c.dropped != 10 {
		t.Errorf("kept %q, dropped %d; want \"the \" and 10", c.buf.String(), c.dropped)
	}
}
