package admin

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/engine/streamhost"
)

// serveCopyRetry handles POST /v1/copies/{stream}/retry: the operator's retry of this node's failed
// copy of a stream (its id, as status lists it under failures). The copy reopens at once through
// recovery, corrupt or not (after a repair); the outcome shows in status. 202 when the reopen
// started, 404 with no copy of that stream here, 409 when the copy has not failed.
func (n *node) serveCopyRetry(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("stream"), 10, 64)
	if err != nil || id == 0 {
		writeStatusJSON(w, http.StatusBadRequest, adminapi.CopyRetry{Error: "want /v1/copies/ID/retry with the stream's id (1..2^64-1)"})
		return
	}
	res := adminapi.CopyRetry{Stream: id}
	done := make(chan error, 1)
	if err := n.streams.RetryCopy(id, func(err error) { done <- err }); err != nil {
		res.Error = err.Error()
		writeStatusJSON(w, http.StatusServiceUnavailable, res)
		return
	}
	select {
	case err = <-done:
	case <-time.After(statusWait):
		res.Error = "the copy's shard did not answer"
		writeStatusJSON(w, http.StatusServiceUnavailable, res)
		return
	}
	status := http.StatusAccepted
	switch {
	case errors.Is(err, streamhost.ErrUnknownStream):
		status = http.StatusNotFound
	case errors.Is(err, streamhost.ErrNotFailed):
		status = http.StatusConflict
	case err != nil:
		status = http.StatusInternalServerError
	}
	if err != nil {
		res.Error = err.Error()
	}
	res.Started = err == nil
	writeStatusJSON(w, status, res)
}
