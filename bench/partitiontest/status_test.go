package partitiontest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// statusPoll is how often the test reads /v1/status while it waits for a state: the nodes are other
// processes, there is no event to wait on.
const statusPoll = 20 * time.Millisecond

// getStatus reads /v1/status at addr over one fresh connection made on the calling thread (so that it
// works inside inNamespace), within timeout.
func getStatus(ctx context.Context, addr string, timeout time.Duration) (adminapi.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return adminapi.Status{}, err
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/status", nil)
	if err != nil {
		return adminapi.Status{}, err
	}
	req.Close = true
	if err := req.Write(nc); err != nil {
		return adminapi.Status{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), req)
	if err != nil {
		return adminapi.Status{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return adminapi.Status{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return adminapi.Status{}, fmt.Errorf("%s/v1/status: %s: %s", addr, resp.Status, body)
	}
	var st adminapi.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return adminapi.Status{}, fmt.Errorf("%s/v1/status: %w", addr, err)
	}
	return st, nil
}

// streamOf is the stream named name in st's metadata, if st holds it.
func streamOf(st adminapi.Status, name string) (adminapi.Stream, bool) {
	for _, s := range st.Streams {
		if s.Name == name {
			return s, true
		}
	}
	return adminapi.Stream{}, false
}

// copyOf is st's open copy of stream id, if it has one.
func copyOf(st adminapi.Status, id uint64) (adminapi.Copy, bool) {
	for _, c := range st.Copies {
		if c.Stream == id && c.Open {
			return c, true
		}
	}
	return adminapi.Copy{}, false
}
