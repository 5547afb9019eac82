package wire

// Test seams: internals the tests reach without widening the exported API.

// SetCountForTest moves an open batch's entry count, to reach the R13 limit without 1.7 million entries.
func (w *BatchWriter) SetCountForTest(n uint32) { w.count = n }

// DecodeHeaderForTest reads a header's fields without checking them, so fuzz targets can hand any
// header to a decoder without first forging checksums.
func DecodeHeaderForTest(b []byte) Header { return decodeHeader(b) }
