package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/config"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/service"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// replayedPrefix marks replayed dead letters: nova.dlq.replayed.<seq> in the
// dead-letter stream holds when and where dead letter <seq> was replayed.
// It matches nova.dlq.> (the stream) but not nova.dlq.* (the dead letters).
const replayedPrefix = "nova.dlq.replayed."

const dlqUsage = `Usage:
  nova dlq list   [--consumer C] [--limit N] [--json]
  nova dlq show   SEQ [--json]
  nova dlq replay SEQ [--again] [--force] [--dry-run]
  nova dlq replay --all [--subject S] [--consumer C] [--again] [--force] [--dry-run]

SEQ is a dead letter's sequence in the NOVA_DLQ stream, as list shows it;
--limit 0 lists them all. replay --all replays every dead letter not replayed
before (with --again, those too), oldest first; --subject keeps those whose
message was on a subject the NATS filter S matches (nova.evt.*.result.>),
--consumer those of one consumer. A replayed message goes to the consumer
that dead-lettered it alone (header Nova-Replay-For; the other consumers of
its subject skip it). A command of an execution that has ended (or whose
state is gone) is not replayed but reported: --force replays it anyway.
--dry-run says what would be replayed where, and what skipped, and sends
nothing. NATS_URL (and NATS credentials, as for the services)
names the server; without it the embedded server of --data-dir is started,
unless nova dev runs: then set NATS_URL=nats://127.0.0.1:4222 to use its server.
`

// devNATSAddr is where nova dev serves NATS unless told otherwise.
const devNATSAddr = "127.0.0.1:4222"

// badSeqError says SEQ names no dead letter: the user's mistake (exit 2).
type badSeqError struct{ msg string }

func (e *badSeqError) Error() string { return e.msg }

// deadLetterView is one dead letter as list and show print it.
type deadLetterView struct {
	Seq            uint64            `json:"seq"`
	ID             string            `json:"id"`
	FailedAt       time.Time         `json:"failed_at"`
	Consumer       string            `json:"consumer"`
	Subject        string            `json:"subject"`
	Stream         string            `json:"stream"`
	StreamSequence uint64            `json:"stream_sequence"`
	Deliveries     uint64            `json:"deliveries"`
	Reason         string            `json:"reason"`
	Size           uint64            `json:"size"`
	Truncated      bool              `json:"truncated"`
	KeptAt         uint64            `json:"kept_at,omitempty"`
	OriginalGone   bool              `json:"original_gone,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	Data           json.RawMessage   `json:"data,omitempty"`
	DataText       string            `json:"data_text,omitempty"`
	Replayed       *replayRecord     `json:"replayed,omitempty"`
}

// replayRecord is the body of a replay marker.
type replayRecord struct {
	At       time.Time `json:"replayed_at"`
	Subject  string    `json:"subject"`
	Stream   string    `json:"stream"`
	Sequence uint64    `json:"sequence"`
	Times    int       `json:"times"`
}

func cmdDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, dlqUsage)
		return exitInvalid
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("dlq "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "./.nova", "data directory of the embedded NATS (when NATS_URL is not set)")
	var consumer *string
	var limit *int
	var asJSON, again, all, force, dryRun *bool
	var subject *string
	switch sub {
	case "list":
		consumer = fs.String("consumer", "", "only this consumer's dead letters")
		limit = fs.Int("limit", 100, "show the newest N")
		asJSON = fs.Bool("json", false, "print JSON")
	case "show":
		asJSON = fs.Bool("json", false, "print JSON")
	case "replay":
		again = fs.Bool("again", false, "replay a dead letter that was replayed before")
		all = fs.Bool("all", false, "replay every dead letter (not replayed before, unless --again)")
		subject = fs.String("subject", "", "with --all: only dead letters of messages on subjects this NATS filter matches")
		consumer = fs.String("consumer", "", "with --all: only this consumer's dead letters")
		force = fs.Bool("force", false, "replay commands of executions that have ended too")
		dryRun = fs.Bool("dry-run", false, "say what would be replayed where, and send nothing")
	default:
		fmt.Fprintf(stderr, "nova dlq: unknown command %q\n\n%s", sub, dlqUsage)
		return exitInvalid
	}
	pos, err := parseFlags(fs, rest)
	if err != nil {
		return exitInvalid
	}
	var seq uint64
	replayAll := all != nil && *all
	if !replayAll && sub == "replay" && (*subject != "" || *consumer != "") {
		fmt.Fprintln(stderr, "nova dlq replay: --subject and --consumer select among all dead letters: use them with --all")
		return exitInvalid
	}
	if replayAll && *subject != "" && !server.IsValidSubject(*subject) {
		fmt.Fprintf(stderr, "nova dlq replay: --subject %q is not a NATS subject filter (tokens separated by '.', '*' for one token, '>' last for the rest)\n", *subject)
		return exitInvalid
	}
	if sub == "list" || replayAll {
		if len(pos) != 0 {
			fmt.Fprintf(stderr, "nova dlq %s: unexpected argument %q\n", sub, pos[0])
			return exitInvalid
		}
	} else {
		if len(pos) != 1 {
			fmt.Fprintf(stderr, "nova dlq %s: want exactly one SEQ\n", sub)
			return exitInvalid
		}
		if seq, err = strconv.ParseUint(pos[0], 10, 64); err != nil || seq == 0 {
			fmt.Fprintf(stderr, "nova dlq %s: SEQ must be a positive number (a dead letter's sequence, see nova dlq list), got %q\n", sub, pos[0])
			return exitInvalid
		}
	}

	b, closeBus, err := connectNATS(ctx, *dataDir, devNATSAddr, "nova-dlq", "dead letters")
	if err != nil {
		fmt.Fprintf(stderr, "nova dlq: %v\n", err)
		return exitFailed
	}
	defer closeBus()
	d := &dlq{b: b}
	if sub == "replay" {
		d.force, d.dryRun = *force, *dryRun
	}
	switch sub {
	case "list":
		return d.list(ctx, *consumer, *limit, *asJSON, stdout, stderr)
	case "show":
		return d.show(ctx, seq, *asJSON, stdout, stderr)
	default:
		if replayAll {
			return d.replayAll(ctx, *subject, *consumer, *again, stdout, stderr)
		}
		return d.replay(ctx, seq, *again, stdout, stderr)
	}
}

// connectNATS connects as clientName to NATS_URL, or starts the embedded
// server of dataDir unless a NATS server (nova dev) answers on devAddr. what
// is what the command reads there ("dead letters"), for its errors.
func connectNATS(ctx context.Context, dataDir, devAddr, clientName, what string) (*bus.Bus, func(), error) {
	if os.Getenv("NATS_URL") != "" {
		var common service.Common
		if err := config.Load(&common, nil); err != nil {
			return nil, nil, err
		}
		natsOpts, err := common.NATSOptions()
		if err != nil {
			return nil, nil, err
		}
		b, err := bus.Connect(ctx, common.NATSURL, bus.WithName(clientName), bus.WithNATSOptions(natsOpts...))
		if err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %w", common.NATSURL, err)
		}
		return b, b.Close, nil
	}
	// nats-server does not lock its store: a second server on the directory
	// nova dev serves starts fine, reads a stale copy and writes into files
	// the first one holds.
	if natsAnswers(ctx, devAddr) {
		return nil, nil, fmt.Errorf("a NATS server answers on %s (nova dev?), and it may be serving %s: two servers on one data directory corrupt it; "+
			"set NATS_URL=nats://%s to read its %s, or stop it first", devAddr, dataDir, devAddr, what)
	}
	// nova dev holds the data dir's lock, whatever port it serves on.
	lock, err := devstack.LockDataDir(dataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("%w; to read the %s of a running nova dev, set NATS_URL to its server", err, what)
	}
	n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dataDir})
	if err != nil {
		lock.Release()
		return nil, nil, fmt.Errorf("start the embedded NATS of %s: %w (if nova dev runs on it, set NATS_URL=nats://%s)", dataDir, err, devAddr)
	}
	b, err := bus.Connect(ctx, n.URL(), bus.WithName(clientName))
	if err != nil {
		n.Shutdown()
		lock.Release()
		return nil, nil, err
	}
	return b, func() { b.Close(); n.Shutdown(); lock.Release() }, nil
}

// natsAnswers reports whether a NATS server greets a connection to addr.
func natsAnswers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetReadDeadline(deadline)
	greeting := make([]byte, len("INFO "))
	_, err = io.ReadFull(conn, greeting)
	return err == nil && string(greeting) == "INFO "
}

type dlq struct {
	b *bus.Bus
	// force replays commands of executions that ended; dryRun sends nothing.
	force, dryRun bool
}

// errNoStream: no NOVA service has run on this server, so there is no
// dead-letter stream and no dead letter.
var errNoStream = fmt.Errorf("there is no dead-letter stream %s yet: no NOVA service has run on this server", bus.StreamDeadLetters)

func (d *dlq) stream(ctx context.Context) (jetstream.Stream, error) {
	s, err := d.b.JetStream().Stream(ctx, bus.StreamDeadLetters)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, errNoStream
	}
	return s, err
}

// read decodes the dead letter at seq of the dead-letter stream.
func (d *dlq) read(ctx context.Context, s jetstream.Stream, seq uint64) (*deadLetterView, *novav1.DeadLetter, error) {
	raw, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, &badSeqError{fmt.Sprintf("no dead letter at %s sequence %d (nova dlq list shows them)", bus.StreamDeadLetters, seq)}
	}
	if err != nil {
		return nil, nil, err
	}
	return decodeDeadLetter(ctx, s, raw)
}

func decodeDeadLetter(ctx context.Context, s jetstream.Stream, raw *jetstream.RawStreamMsg) (*deadLetterView, *novav1.DeadLetter, error) {
	tokens := strings.Split(raw.Subject, ".")
	if len(tokens) != 3 {
		return nil, nil, &badSeqError{fmt.Sprintf("%s sequence %d (%s) is not a dead letter", bus.StreamDeadLetters, raw.Sequence, raw.Subject)}
	}
	ev, err := bus.DecodeNATS(raw.Header, raw.Data)
	if err != nil {
		return nil, nil, &badSeqError{fmt.Sprintf("%s sequence %d (%s) is not a dead letter: %v", bus.StreamDeadLetters, raw.Sequence, raw.Subject, err)}
	}
	if ev.Type() != bus.TypeDeadLetter {
		return nil, nil, &badSeqError{fmt.Sprintf("%s sequence %d is a %s event, not a dead letter", bus.StreamDeadLetters, raw.Sequence, ev.Type())}
	}
	var dl novav1.DeadLetter
	if err := bus.Decode(*ev, &dl); err != nil {
		return nil, nil, fmt.Errorf("%s sequence %d: %w", bus.StreamDeadLetters, raw.Sequence, err)
	}
	v := &deadLetterView{
		Seq: raw.Sequence, ID: ev.ID(), FailedAt: dl.GetFailedAt().AsTime(), Consumer: dl.Consumer, Subject: dl.Subject,
		Stream: dl.Stream, StreamSequence: dl.StreamSequence, Deliveries: dl.Deliveries, Reason: dl.Reason,
		Size: max(dl.DataSize, uint64(len(dl.Data))), Truncated: dl.Truncated, KeptAt: dl.OriginalSequence, Headers: dl.Headers,
	}
	if json.Valid(dl.Data) {
		v.Data = json.RawMessage(dl.Data)
	} else {
		v.DataText = string(dl.Data)
	}
	if m, err := s.GetLastMsgForSubject(ctx, replayedPrefix+strconv.FormatUint(raw.Sequence, 10)); err == nil {
		var r replayRecord
		if json.Unmarshal(m.Data, &r) == nil {
			v.Replayed = &r
		}
	}
	return v, &dl, nil
}

// deadLetters returns the newest limit dead letters (0: all), oldest
// first, of consumer (every consumer when ""); none when there is no
// dead-letter stream yet.
func (d *dlq) deadLetters(ctx context.Context, consumer string, limit int) ([]*deadLetterView, error) {
	s, err := d.stream(ctx)
	if errors.Is(err, errNoStream) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	filter := "nova.dlq.*"
	if consumer != "" {
		filter = bus.DeadLetterSubject(consumer)
	}
	return d.collect(ctx, s, filter, limit)
}

func (d *dlq) list(ctx context.Context, consumer string, limit int, asJSON bool, stdout, stderr io.Writer) int {
	views, err := d.deadLetters(ctx, consumer, limit)
	if err != nil {
		fmt.Fprintf(stderr, "nova dlq list: %v\n", err)
		return exitFailed
	}
	if asJSON {
		for _, v := range views {
			v.Headers, v.Data, v.DataText = nil, nil, ""
		}
		if views == nil {
			views = []*deadLetterView{}
		}
		return printJSON(stdout, stderr, views)
	}
	if len(views) == 0 {
		fmt.Fprintln(stdout, "no dead letters")
		return exitOK
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SEQ\tFAILED AT\tCONSUMER\tSUBJECT\tDELIVERIES\tSIZE\tREPLAYED\tREASON")
	for _, v := range views {
		size := byteSize(v.Size)
		if v.Truncated {
			size += " (cut)"
		}
		replayed := "no"
		if v.Replayed != nil {
			replayed = "yes"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", v.Seq, v.FailedAt.Local().Format(time.DateTime), v.Consumer, v.Subject,
			v.Deliveries, size, replayed, oneLine(v.Reason, 80))
	}
	_ = w.Flush()
	return exitOK
}

// collect reads the newest limit dead letters matching filter (all when
// limit is 0), oldest first.
func (d *dlq) collect(ctx context.Context, s jetstream.Stream, filter string, limit int) ([]*deadLetterView, error) {
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	var total uint64
	for _, n := range info.State.Subjects {
		total += n
	}
	if total == 0 {
		return nil, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return nil, err
	}
	// Only the newest limit are decoded; the others are read past.
	var raws []*jetstream.RawStreamMsg
	for read := uint64(0); read < total; {
		batch, err := c.Fetch(int(min(total-read, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			raws = append(raws, &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(), Data: m.Data()})
			if limit > 0 && len(raws) > limit {
				raws = raws[1:]
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if n == 0 {
			break // the rest expired meanwhile
		}
		read += uint64(n)
	}
	views := make([]*deadLetterView, 0, len(raws))
	for _, raw := range raws {
		v, _, err := decodeDeadLetter(ctx, s, raw)
		if err != nil {
			v = &deadLetterView{Seq: raw.Sequence, Subject: raw.Subject, Reason: "unreadable: " + err.Error()}
		}
		views = append(views, v)
	}
	return views, nil
}

func (d *dlq) show(ctx context.Context, seq uint64, asJSON bool, stdout, stderr io.Writer) int {
	v, dl, code, err := d.get(ctx, seq)
	if err != nil {
		fmt.Fprintf(stderr, "nova dlq show: %v\n", err)
		return code
	}
	// Where the whole message of a cut one is, or that it is gone.
	var whole string
	if v.Truncated {
		excerpt := fmt.Sprintf("the first %d of %d bytes", len(dl.GetData()), v.Size)
		_, err := d.b.DeadLetterOriginal(ctx, dl)
		switch {
		case err == nil && v.KeptAt > 0:
			whole = fmt.Sprintf("%s; the whole message is kept at %s sequence %d", excerpt, bus.StreamDeadLetters, v.KeptAt)
		case err == nil:
			whole = fmt.Sprintf("%s; the whole message is still in %s at sequence %d", excerpt, v.Stream, v.StreamSequence)
		case errors.Is(err, bus.ErrOriginalGone):
			v.OriginalGone = true
			whole = fmt.Sprintf("%s; the whole message is gone: it is no longer in %s at sequence %d and no copy was kept, so only this excerpt is left",
				excerpt, v.Stream, v.StreamSequence)
		default:
			whole = fmt.Sprintf("%s; the whole message could not be read: %v", excerpt, err)
		}
	}
	if asJSON {
		return printJSON(stdout, stderr, v)
	}
	fmt.Fprintf(stdout, "dead letter %d (%s)\n", v.Seq, v.ID)
	fmt.Fprintf(stdout, "  consumer:   %s\n  subject:    %s\n  message:    %s sequence %d\n  deliveries: %d\n  failed at:  %s\n",
		v.Consumer, v.Subject, v.Stream, v.StreamSequence, v.Deliveries, v.FailedAt.Local().Format(time.RFC3339))
	if v.Replayed != nil {
		fmt.Fprintf(stdout, "  replayed:   %s to %s (%s sequence %d), %d time(s)\n", v.Replayed.At.Local().Format(time.RFC3339),
			v.Replayed.Subject, v.Replayed.Stream, v.Replayed.Sequence, v.Replayed.Times)
	} else {
		fmt.Fprintln(stdout, "  replayed:   no")
	}
	fmt.Fprintf(stdout, "  reason:\n%s", indent(v.Reason, "    "))
	fmt.Fprintln(stdout, "  headers:")
	for _, k := range slices.Sorted(maps.Keys(v.Headers)) {
		fmt.Fprintf(stdout, "    %s: %s\n", k, v.Headers[k])
	}
	if whole != "" {
		fmt.Fprintf(stdout, "  data (%s):\n", whole)
	} else {
		fmt.Fprintf(stdout, "  data (%s):\n", byteSize(v.Size))
	}
	var pretty bytes.Buffer
	if v.Data != nil && json.Indent(&pretty, v.Data, "    ", "  ") == nil {
		fmt.Fprintf(stdout, "    %s\n", pretty.String())
	} else {
		fmt.Fprintf(stdout, "    %q\n", v.DataText)
	}
	return exitOK
}

// get reads dead letter seq; on error it also returns the exit code: 2 when
// seq names no dead letter, 1 when it could not be read.
func (d *dlq) get(ctx context.Context, seq uint64) (*deadLetterView, *novav1.DeadLetter, int, error) {
	s, err := d.stream(ctx)
	if errors.Is(err, errNoStream) {
		return nil, nil, exitInvalid, fmt.Errorf("no dead letter %d: %w", seq, err)
	}
	if err != nil {
		return nil, nil, exitFailed, err
	}
	v, dl, err := d.read(ctx, s, seq)
	if bad := (*badSeqError)(nil); errors.As(err, &bad) {
		return nil, nil, exitInvalid, err
	}
	if err != nil {
		return nil, nil, exitFailed, err
	}
	return v, dl, exitOK, nil
}

func (d *dlq) replay(ctx context.Context, seq uint64, again bool, stdout, stderr io.Writer) int {
	v, dl, code, err := d.get(ctx, seq)
	if err != nil {
		fmt.Fprintf(stderr, "nova dlq replay: %v\n", err)
		return code
	}
	if v.Replayed != nil && !again {
		fmt.Fprintf(stderr, "nova dlq replay: dead letter %d was replayed at %s to %s (%s sequence %d); use --again to replay it once more\n",
			seq, v.Replayed.At.Local().Format(time.RFC3339), v.Replayed.Subject, v.Replayed.Stream, v.Replayed.Sequence)
		return exitInvalid
	}
	skip, err := d.replayOne(ctx, v, dl, stdout)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "nova dlq replay: %v\n", err)
		return exitFailed
	case skip != "":
		fmt.Fprintf(stderr, "nova dlq replay: dead letter %d not replayed: %s; --force replays it anyway\n", seq, skip)
		return exitInvalid
	}
	return exitOK
}

// replayAll replays, oldest first, every dead letter of consumer (all
// consumers when "") whose message was on a subject the filter subject
// matches (any when ""), those replayed before only when again. It goes on
// past a dead letter it cannot replay and fails at the end if there was one.
func (d *dlq) replayAll(ctx context.Context, subject, consumer string, again bool, stdout, stderr io.Writer) int {
	views, err := d.deadLetters(ctx, consumer, 0)
	if err != nil {
		fmt.Fprintf(stderr, "nova dlq replay: %v\n", err)
		return exitFailed
	}
	var replayed, before, ended, failed int
	for _, v := range views {
		if subject != "" && !server.SubjectMatchesFilter(v.Subject, subject) {
			continue
		}
		if v.Replayed != nil && !again {
			before++
			continue
		}
		_, dl, _, err := d.get(ctx, v.Seq)
		var skip string
		if err == nil {
			skip, err = d.replayOne(ctx, v, dl, stdout)
		}
		switch {
		case err != nil:
			failed++
			fmt.Fprintf(stderr, "nova dlq replay: %v\n", err)
		case skip != "":
			ended++
			fmt.Fprintf(stdout, "skipped dead letter %d (%s, consumer %s): %s\n", v.Seq, v.Subject, v.Consumer, skip)
		default:
			replayed++
		}
	}
	if d.dryRun {
		fmt.Fprintf(stdout, "would replay %d dead letter(s)", replayed)
	} else {
		fmt.Fprintf(stdout, "replayed %d dead letter(s)", replayed)
	}
	if ended > 0 {
		fmt.Fprintf(stdout, "; %d command(s) of executions that ended skipped (--force replays them)", ended)
	}
	if before > 0 {
		fmt.Fprintf(stdout, "; %d replayed before left alone (--again replays them)", before)
	}
	fmt.Fprintln(stdout)
	if failed > 0 {
		fmt.Fprintf(stderr, "nova dlq replay: %d dead letter(s) could not be replayed (above)\n", failed)
		return exitFailed
	}
	return exitOK
}

// replayOne publishes the message of dead letter v (dl) again where it was,
// for the consumer that dead-lettered it alone, and records that it did.
// A command of an execution that has ended is not replayed (unless
// d.force): skip says why. With d.dryRun it says what it would do.
func (d *dlq) replayOne(ctx context.Context, v *deadLetterView, dl *novav1.DeadLetter, stdout io.Writer) (skip string, err error) {
	times := 1
	if v.Replayed != nil {
		times = v.Replayed.Times + 1
	}
	orig, err := d.b.DeadLetterOriginal(ctx, dl)
	if err != nil {
		return "", fmt.Errorf("dead letter %d (%s sequence %d) cannot be replayed: %w", v.Seq, dl.GetStream(), dl.GetStreamSequence(), err)
	}
	if !d.force {
		if skip, err = d.endedCommand(ctx, dl, orig); err != nil || skip != "" {
			return skip, err
		}
	}
	if d.dryRun {
		fmt.Fprintf(stdout, "would replay dead letter %d: %s to %s, for consumer %s\n", v.Seq, byteSize(uint64(len(orig.Data))), orig.Subject, dl.GetConsumer())
		return "", nil
	}
	m := nats.NewMsg(orig.Subject)
	for k, vals := range orig.Header {
		if k == jetstream.MsgIDHeader || k == bus.ReplayForHeader || bus.PublishControl(k) {
			continue
		}
		m.Header[k] = vals
	}
	if dl.GetConsumer() != "" {
		m.Header.Set(bus.ReplayForHeader, dl.GetConsumer())
	}
	// The same replay published twice (a retry, two operators at once)
	// within the duplicate window is stored once.
	msgID := "replay:" + v.ID
	if times > 1 {
		msgID += ":" + strconv.Itoa(times)
	}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	m.Data = orig.Data
	ack, err := d.b.JetStream().PublishMsg(ctx, m)
	if err != nil {
		return "", fmt.Errorf("dead letter %d: publish to %s: %w", v.Seq, orig.Subject, err)
	}
	rec, err := json.Marshal(replayRecord{At: time.Now().UTC(), Subject: orig.Subject, Stream: ack.Stream, Sequence: ack.Sequence, Times: times})
	if err == nil {
		marker := nats.NewMsg(replayedPrefix + strconv.FormatUint(v.Seq, 10))
		marker.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("replayed:%d:%d", v.Seq, times))
		marker.Data = rec
		_, err = d.b.JetStream().PublishMsg(ctx, marker)
	}
	if err != nil {
		return "", fmt.Errorf("dead letter %d replayed to %s (%s sequence %d), but could not record it, so a replay without --again is not refused: %w",
			v.Seq, orig.Subject, ack.Stream, ack.Sequence, err)
	}
	fmt.Fprintf(stdout, "replayed dead letter %d: published %s to %s, %s sequence %d (Nats-Msg-Id %s), for consumer %s\n",
		v.Seq, byteSize(uint64(len(orig.Data))), orig.Subject, ack.Stream, ack.Sequence, msgID, dl.GetConsumer())
	if ack.Duplicate {
		fmt.Fprintln(stdout, "  the server already had this replay (published within its duplicate window) and stored it once")
	}
	return "", nil
}

// endedCommand says why a dead-lettered command must not run again: its
// execution has ended, or has no state any more (it ended long ago). A
// workflow's start is replayed while its execution has no state; an event,
// or a command naming no execution, always.
func (d *dlq) endedCommand(ctx context.Context, dl *novav1.DeadLetter, orig *bus.Original) (string, error) {
	if dl.GetStream() != bus.StreamCommands {
		return "", nil
	}
	id := orig.Header.Get("ce-" + bus.ExtensionExecutionID)
	if id == "" {
		return "", nil
	}
	st, err := engineState(ctx, d.b, id)
	if err != nil {
		return "", fmt.Errorf("dead letter of a command of execution %s: its state cannot be read: %w", id, err)
	}
	switch {
	case st == nil && orig.Header.Get("ce-type") == bus.TypeWorkflowStart:
		return "", nil
	case st == nil:
		return fmt.Sprintf("execution %s has no state: it ended long ago, or never started", id), nil
	case execution.Ended(st.Status):
		return fmt.Sprintf("execution %s ended (%s)", id, st.Status), nil
	}
	return "", nil
}

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "nova: write JSON: %v\n", err)
		return exitFailed
	}
	return exitOK
}

func byteSize(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
