package partitiontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/engine/adminapi"
)

// probeTimeout bounds each of a probe's requests to the cut node.
const probeTimeout = 1500 * time.Millisecond

// probe is what the cut node did for a client inside its namespace at one moment.
type probe struct {
	after      time.Duration // since the cut
	status     adminapi.Status
	statusErr  error
	fetched    int // records a fetch from offset 0 returned
	fetchErr   error
	fetchLog   string // the client's records of the fetch's attempts
	produced   int    // records the probe appended
	confirmed  bool   // the probe's batch was confirmed
	produceErr error
}

func (p probe) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v after the cut: ", p.after.Round(time.Millisecond))
	if p.fetchErr != nil {
		fmt.Fprintf(&b, "fetch refused (%v)", p.fetchErr)
	} else {
		fmt.Fprintf(&b, "fetch served %d records", p.fetched)
	}
	if p.produced > 0 {
		if p.confirmed {
			fmt.Fprintf(&b, "; produce of %d records confirmed", p.produced)
		} else {
			fmt.Fprintf(&b, "; produce of %d records not confirmed (%v)", p.produced, p.produceErr)
		}
	}
	return b.String()
}

// probeTarget is the cut node as a probe reaches it.
type probeTarget struct {
	ns, clientAddr, adminAddr string
	cluster                   uint64
	secret                    []byte
	stream                    string
}

// prober probes the cut node from a client made inside its namespace. The client is made once, on
// the first probe, while the node still answers lookups, and keeps its route and its connection to the
// node: later probes reach the stream's copy without a metadata lookup, which a cut-off metadata
// replica may refuse on its own account.
type prober struct {
	probeTarget
	cutAt time.Time
	c     *client.Client
	log   lockedBuffer // the client's debug records: each refused attempt, with its error
}

// lockedBuffer is a bytes.Buffer safe for the client's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// take returns what was written since the last take.
func (l *lockedBuffer) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}

// close closes the probe's client.
func (pr *prober) close() {
	if pr.c != nil {
		pr.c.Close()
	}
}

// run probes the target from inside its namespace: its /v1/status, a fetch from offset 0, and, when
// produce > 0, one batch of that many records (probe-<tag>-<i>) that must be confirmed within
// probeTimeout.
func (pr *prober) run(ctx context.Context, tag string, produce int) (probe, error) {
	p := probe{after: time.Since(pr.cutAt)}
	err := inNamespace(pr.ns, func() error {
		p.status, p.statusErr = getStatus(ctx, pr.adminAddr, probeTimeout)
		if pr.c == nil {
			c, err := client.Dial(ctx, client.Config{Addrs: []string{pr.clientAddr}, Cluster: pr.cluster, Secret: pr.secret,
				DialTimeout: probeTimeout, RequestTimeout: probeTimeout, Retries: 1, BackoffMax: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&pr.log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				return fmt.Errorf("probe client in %s: %w", pr.ns, err)
			}
			pr.c = c
		}
		pr.log.take()
		fctx, cancel := context.WithTimeout(ctx, probeTimeout)
		recs, err := pr.c.Fetch(fctx, pr.stream, 0, client.FetchOptions{RecordsMax: 100})
		cancel()
		p.fetchLog = pr.log.take()
		if err == nil {
			for recs.Next() {
				p.fetched++
			}
			err = recs.Err()
		}
		p.fetchErr = err
		if produce > 0 {
			p.produced = produce
			p.confirmed, p.produceErr = pr.produce(ctx, pr.c, tag, produce)
		}
		return nil
	})
	return p, err
}

// produce appends n records in one batch and reports whether it was confirmed within probeTimeout.
func (pt probeTarget) produce(ctx context.Context, c *client.Client, tag string, n int) (bool, error) {
	pr, err := c.Producer(client.ProducerConfig{Stream: pt.stream, Linger: time.Second})
	if err != nil {
		return false, err
	}
	pad := strings.Repeat(".", 100)
	for i := range n {
		if err := pr.Append(ctx, []byte(probePrefix+tag+"-"+strconv.Itoa(i)+pad)); err != nil {
			return false, err
		}
	}
	fctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err = pr.Flush(fctx)
	closeCtx, cancelClose := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancelClose()
	pr.Close(closeCtx) // aborts what is not confirmed
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no confirm within %v", probeTimeout)
	}
	return err == nil, err
}
