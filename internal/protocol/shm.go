package protocol

import (
	"encoding/binary"
	"fmt"
)

// The header of a shared-memory channel's memfd (docs/SHM.md, "Layout").
// The agent writes it; the library checks it once, at attach.
const (
	ShmMagic      = 0x4d534646 // the bytes 46 46 53 4d, "FFSM"
	ShmVersion    = 2
	ShmHeaderSize = 4096     // header and control blocks; the rings follow
	ShmRingMin    = 4096     // smallest ring_size
	ShmRingMax    = 16 << 20 // largest ring_size
	shmHeaderUsed = 16       // magic, version, ring_size, reserved
	// ShmKeep is how much of the start of each ring stays in memory once
	// the ring drains; the pages past it are given back (docs/SHM.md,
	// "Giving memory back").
	ShmKeep = 256 << 10
)

// ShmResident is the most memory a channel whose rings have ringSize bytes
// each holds once both rings drained: the header page and the kept start
// of each ring.
func ShmResident(ringSize uint32) int64 {
	return ShmHeaderSize + 2*int64(min(ringSize, ShmKeep))
}

// ShmSize is the size of the memfd of a channel whose two rings have
// ringSize bytes each.
func ShmSize(ringSize uint32) int64 { return ShmHeaderSize + 2*int64(ringSize) }

// ShmHeader returns the first bytes of the memfd for rings of ringSize
// bytes; the rest of the memfd is zero. ringSize must be a power of two
// within [ShmRingMin, ShmRingMax].
func ShmHeader(ringSize uint32) ([]byte, error) {
	if ringSize < ShmRingMin || ringSize > ShmRingMax || ringSize&(ringSize-1) != 0 {
		return nil, fmt.Errorf("shm ring size %d is not a power of two between %d and %d", ringSize, ShmRingMin, ShmRingMax)
	}
	b := make([]byte, 0, shmHeaderUsed)
	b = binary.LittleEndian.AppendUint32(b, ShmMagic)
	b = binary.LittleEndian.AppendUint32(b, ShmVersion)
	b = binary.LittleEndian.AppendUint32(b, ringSize)
	return binary.LittleEndian.AppendUint32(b, 0), nil
}
