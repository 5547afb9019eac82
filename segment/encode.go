package segment

// AppendBatch encodes one batch (header h, payload) in the on-disk format onto dst and returns it;
// h.PayloadLen is taken from payload. It is the encoder behind Append, exported for hosts and
// simulators that hold a copy's batches outside a Log (engine/sim, tests of engine/stream), so one
// format has one encoder.
func AppendBatch(dst []byte, h *BatchHeader, payload []byte) []byte {
	return appendBatch(dst, h, payload)
}

// AppendBatchSummed is AppendBatch for a payload whose checksum (xxhash64 of payload) the caller
// already has: an owner whose produce frame's body, verified by its body checksum, is the payload
// exactly. The payload is then hashed once on its way in, not twice.
func AppendBatchSummed(dst []byte, h *BatchHeader, payload []byte, payloadSum uint64) []byte {
	return appendBatchSummed(dst, h, payload, payloadSum)
}
