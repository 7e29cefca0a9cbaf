// Package grpcmsg decodes and encodes the protobuf messages of tollgated's
// gRPC services without allocating: Envoy's rate-limit service
// (envoy.service.ratelimit.v3), its external authorizer
// (envoy.service.auth.v3) and the gRPC health service (grpc.health.v1).
//
// The daemon's hot path allocates nothing, and proto.Unmarshal into the
// generated types allocates every message, string and map. Here a request
// is decoded in place into a struct the caller reuses: its slices are
// backed by fixed arrays inside the struct and its byte slices alias the
// message. So the bounds on repeated fields (MaxDescriptors, MaxEntries,
// MaxHeaders) are hard: a message over one is refused with an error
// naming the field, which the caller answers with INVALID_ARGUMENT. An
// answer is appended to a caller's buffer from a struct of the same kind,
// after a pass that sizes its embedded messages.
//
// Only the fields tollgated reads are decoded. For those, Decode follows
// proto3 as proto.Unmarshal into the generated types does:
//
//   - a field it does not read is skipped whatever its wire type, groups
//     included (with their matching end marker), as proto skips an
//     unknown field; a known field number with another wire type than
//     its own is such a field too;
//   - wire data that is not well-formed is refused, as is a field number
//     of 0 or over 2^29-1, a reserved wire type or a stray end-group marker;
//   - a singular scalar seen again replaces the earlier value (last wins);
//     a singular embedded message seen again is merged into the earlier;
//     each occurrence of a repeated field appends, in order;
//   - a map entry missing its key or value has it empty, and an entry
//     whose key is already there replaces the earlier entry's value in
//     place (the last one wins);
//   - every string field read must be valid UTF-8; bytes fields need not.
//
// None of the fields read is a repeated scalar, so packed encoding does
// not arise: a packed (length-delimited) value for a singular scalar is
// a wire-type mismatch, skipped as proto skips it.
//
// Where Decode deliberately differs from proto.Unmarshal:
//
//   - The contents of a field it does not read are not validated. proto
//     parses every field its schema knows — attributes.source, a
//     descriptor's limit, metadata_context — and refuses the message if
//     one holds a string that is not UTF-8 or wire data that is not
//     well-formed; Decode checks such a field only at the level it
//     occurs (its tag and extent), as proto checks an unknown field. So
//     Decode accepts every message proto.Unmarshal accepts (within the
//     bounds), and some it refuses, never for a field it returns.
//   - Bounds: MaxDescriptors, MaxEntries and MaxHeaders.
//   - A descriptor's limit override is reported as present (HasLimit),
//     not decoded.
//   - A header_map entry's raw_value stands in for its value when the
//     value is empty (Header.Value); which of the two it was is not kept.
//   - Map headers are kept in the order their keys first appear, before
//     the header_map's, whatever order the two fields come in.
//   - A present but empty string may be nil or empty: compare lengths.
//   - Unknown fields are dropped, not kept for marshalling again.
//
// The encoders write what proto.Marshal writes for the same message: the
// same bytes, fields in number order. They do not check UTF-8: the caller
// passes valid UTF-8 in string fields (header names and values, names,
// messages, bodies), as proto.Marshal would refuse a message otherwise
// and a peer parsing it would too. HTTP field values of visible ASCII
// are; obs-text bytes are not.
package grpcmsg
