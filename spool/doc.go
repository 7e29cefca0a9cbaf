// Package spool is the local append-only usage spool: billed usage events
// are appended to it and acknowledged to clients only once the spool says
// they are on disk, so acknowledged usage survives kill -9 and power loss.
//
// # Roles
//
// One control-plane goroutine appends (Append copies into memory and never
// touches the disk, so it never blocks on I/O). A flusher goroutine owned by
// the spool writes what is pending with one write per chunk and one
// fdatasync per batch (group commit), then calls OnDurable and advances Durable; only
// records at or below Durable may be acknowledged. An exporter reads durable
// records (Read), ships them to the ledger, which is idempotent by event id,
// and then calls Release, after which the spool may delete them. On start,
// Replay hands every durable, unreleased record back, in sequence order.
//
// # Group commit
//
// Append encodes the record (header, CRC, payload) into a recycled 256 KiB
// chunk under a mutex and returns; it allocates nothing once the spool has
// seen its load, and refuses with ErrFull rather than buffer more than
// MaxPendingBytes. The flusher takes all pending chunks at once, writes them
// (one pwrite per chunk) and fdatasyncs once, so a batch costs one sync
// however many records it holds.
//
// # Growing ahead
//
// An fdatasync that follows a write past the end of a file must also write
// the inode, for the new size: two I/Os in a row instead of one. So the
// flusher writes records into zeros it made durable beforehand: it extends
// the segment by Options.GrowBytes of zeros and fdatasyncs them when a
// batch would not fit (one step per GrowBytes, not the whole segment at a
// roll), then writes records in place at the end of the records, and the
// batch's fdatasync writes data only. Growth stops at SegmentBytes. A
// segment is trimmed to its records (ftruncate, fsync) when the flusher
// rolls from it and when the spool is closed, so only the last segment,
// and only while written or after a crash, carries zeros. It starts a flush at most once per
// FlushInterval, at once when MaxBatchBytes are pending, and on Sync and
// Close. A failed write or sync is permanent (ErrBroken): after it, the
// kernel may have dropped the data while a retried sync succeeds.
//
// # Sequence numbers
//
// Every record gets a sequence number, assigned by Append: the first record
// of a new spool is 1 and each record is exactly one more than the one before
// it, across segments and restarts. Zero means "no record". Invariant:
// released ≤ durable ≤ appended.
//
// # On-disk format
//
// A spool directory holds:
//
//	LOCK                      empty; held with flock(LOCK_EX) while open
//	RELEASED                  the released mark (below)
//	RELEASED.tmp              transient, while the mark is being replaced
//	OWNER                     the owner label SetOwner stored (owner.go), if any
//	OWNER.tmp                 transient, while the owner is being replaced
//	00000000000000000001.seg  segment files, named by the sequence number of
//	00000000000000052113.seg  their first record, 20 decimal digits so that
//	...                       names sort in sequence order
//
// A segment file is a sequence of records; the last segment may be followed
// by zeros to the end of the file (see Growing ahead). A record is a 16-byte
// header followed by its payload, all little endian:
//
//	offset 0   uint32  length of the payload in bytes (at most MaxPayload)
//	offset 4   uint32  CRC-32C (Castagnoli) of bytes 8 .. 16+length, that is
//	                   of the sequence number followed by the payload
//	offset 8   uint64  sequence number
//	offset 16  length bytes of payload
//
// The log ends at the first record boundary of the last segment from which
// the rest of the file is zero bytes; a zero header cannot start a record,
// because no record has sequence number 0. In any other segment, and
// anywhere a non-zero byte follows, bytes that are not a good record are
// damage or a torn tail (Recovery). Writing continues at the end of the
// records, not the end of the file.
//
// Records are never split across segments. The first record of a segment
// carries the sequence number in the file name, and the first record of each
// segment follows the last record of the previous one without a gap. Only
// the last segment is ever written to; the flusher rolls to a new one when
// the current one's records have reached Options.SegmentBytes (so a segment
// holds at least one record and at most SegmentBytes plus one record). A
// new segment is created and the directory fsync'd before any record is
// written to it; the old one is fdatasync'd and trimmed before the roll.
//
// RELEASED is 20 bytes: the magic "TGSPREL1", the released sequence number
// (uint64), and the CRC-32C of the 16 bytes before it. It is replaced
// atomically: written to RELEASED.tmp, fsync'd, renamed over RELEASED, and
// the directory fsync'd. A missing RELEASED means nothing was released.
// Records at or below the mark are never replayed or read again, even if a
// segment still holds some of them.
//
// # Recovery
//
// Open scans every segment that holds unreleased records and checks every
// record (length bound, CRC, sequence number), up to the zeros that end the
// log, which it keeps for the records to come. A bad record at the tail of
// the last segment is the remains of a write that a crash cut short: no
// acknowledged record can follow it, because an fdatasync covers the whole
// file, so Open truncates the segment to the last good record and fsyncs it.
// "At the tail" means that no well-formed record with a plausible sequence
// number exists anywhere after the bad bytes; if one does, or if the bad
// record is in any other segment, Open fails with an error naming the file
// and offset rather than drop records that may have been acknowledged. A
// sequence gap between segments, or between the released mark and the first
// segment, is likewise an error.
//
// Open also fdatasyncs the last segment, so that records a killed process
// left in the page cache are durable before they are replayed and counted
// in Durable, and so are the zeros after them that the flusher will write
// records into.
//
// What Open cuts is never silent: Dropped names the file, the offset, the
// bytes and the records they held as far as their headers tell, for the
// caller to log and count. Verify reads a spool without changing it, past
// damage, and reports every damaged stretch and the sequence numbers no
// good record carries; its start-up verdict is the check Open makes before
// it changes anything. Quarantine puts every good unreleased record into a
// new spool, swaps it in atomically, and moves the original aside.
//
// # Archive and Follow
//
// With Options.ArchiveDir, Release moves the segments it would delete into
// that directory, named by their first and last sequence numbers, and Open
// finishes a move a crash interrupted; the archive drops its oldest
// segments beyond ArchiveMaxBytes or ArchiveMaxAge (archive.go). Follow
// reads every durable record by sequence number, archived or not, released
// or not, with its own files: a reader's position stays valid across
// restarts and crashes, and a position the archive dropped is ErrExpired.
// The write path does not touch the archive.
//
// Known limits: damage confined to the last record of the last segment
// cannot be told from a torn write and is cut away like one, and damage
// that zeroed the last records of the last segment and everything after
// them cannot be told from the end of the log. Records go into grown
// zeros in place, so a power cut during a batch's fdatasync may leave a
// later page of the batch on disk and an earlier one not: zeros, then whole
// records. None of them was acknowledged (an answer waits for the whole
// sync), and Open cuts them as a torn tail when the gap starts with zeros
// to the end of its page, the records after it are consecutive from the
// next expected number, nothing else follows, and they end within 4 MiB;
// the same shape anywhere else — or damage that zeroes a page of
// acknowledged records just there — is judged that way too. Any other
// good record after damage refuses the start. Bytes cut are reported up
// to the last byte that is not zero. Release does not fsync the
// directory after deleting segments: a deletion lost in a crash is redone
// by the next Open, because the mark that justified it is durable.
package spool
