package segment

// AppendBatch encodes one batch (header h, payload) in the on-disk format onto dst and returns it;
// h.PayloadLen is taken from payload. It is the encoder behind Append, exported for hosts and
// simulators that hold a copy's batches outside a Log (engine/sim, tests of engine/stream), so one
// format has one encoder.
func AppendBatch(dst []byte, h *BatchHeader, payload []byte) []byte {
	return appendBatch(dst, h, payload)
}
