// Package hpack implements HPACK (RFC 7541), the header compression of
// HTTP/2, for the server side of connections carrying gRPC.
//
// A Decoder decodes the header blocks of one connection, in order, into a
// Fields. Both allocate their storage once, when made, sized by the limits
// the server advertises (SETTINGS_HEADER_TABLE_SIZE and
// SETTINGS_MAX_HEADER_LIST_SIZE); decoding allocates nothing, so that it
// can sit on a hot path that must not allocate. The dynamic table keeps its
// entries' octets in a fixed ring, and Huffman codes are decoded by an
// automaton built when the package is initialized.
//
// Decode distinguishes two failures, as HTTP/2 must. ErrCompression means
// the block is malformed and the connection has to end with
// COMPRESSION_ERROR. ErrTooLarge means the header list exceeds its bound;
// the block was still decoded whole, so the dynamic table stays in step
// with the peer's and only the stream need fail.
//
// The package does not check the contents of fields, such as the case of
// names or pseudo-header rules: that is for the HTTP/2 layer.
//
// The encoding side is a set of Append functions for answers made of
// constant fields. They use only the static table and plain literals that
// are never indexed, so the server keeps no encoder state and never adds to
// the client's decoding table.
package hpack
