package agent

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// verbsSeals are the seals every memfd of the verbs device has: the agent
// and the peers map it, so it must not shrink under them (SIGBUS) or grow
// past what was checked.
const verbsSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// sealedMemfd returns the size and seals of fd, what names it in an error,
// or INVALID unless it is a memfd sealed against shrinking and growing.
func sealedMemfd(fd int, what string) (int64, int, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil { // EINVAL: not a memfd
		return 0, 0, protocol.Errorf(protocol.CodeInvalid, "%s is not a memfd (F_GET_SEALS: %v); send one made with memfd_create(MFD_ALLOW_SEALING)", what, err)
	}
	if seals&verbsSeals != verbsSeals {
		return 0, 0, protocol.Errorf(protocol.CodeInvalid,
			"%s is not sealed against shrinking and growing (seals %#x); seal it with F_SEAL_SHRINK | F_SEAL_GROW", what, seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, protocol.Errorf(protocol.CodeInvalid, "%s cannot be read (fstat: %v); send a memfd", what, err)
	}
	return st.Size, seals, nil
}

// checkQPMemfd checks a QP's memfd as VERBS_QP_CREATE requires: sealed,
// open for writing and writable by its peers, 4096 + ring_size bytes for a
// ring_size the header states, a power of two from 4 KiB to 16 MiB.
func checkQPMemfd(fd int) error {
	const what = "the QP's descriptor"
	size, seals, err := sealedMemfd(fd, what)
	if err != nil {
		return err
	}
	if seals&(unix.F_SEAL_WRITE|unix.F_SEAL_FUTURE_WRITE) != 0 {
		return protocol.Errorf(protocol.CodeInvalid, "the QP's memfd is sealed against writing (seals %#x); its peers write its ring: do not add F_SEAL_WRITE or F_SEAL_FUTURE_WRITE", seals)
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE != unix.O_RDWR {
		return protocol.Errorf(protocol.CodeInvalid, "the QP's memfd is not open for reading and writing (flags %#x, %v); send the descriptor memfd_create returned", fl, err)
	}
	ring := size - protocol.VQPHeaderSize
	if ring < protocol.VQPRingMin || ring > protocol.VQPRingMax || ring&(ring-1) != 0 {
		return protocol.Errorf(protocol.CodeInvalid,
			"the QP's memfd has %d bytes; it must have 4096 + ring_size, ring_size a power of two from %d to %d (docs/VERBS.md, \"Queue pair memory\")",
			size, protocol.VQPRingMin, protocol.VQPRingMax)
	}
	var h [protocol.VQPOffRingSize + 4]byte
	if n, err := unix.Pread(fd, h[:], 0); err != nil || n != len(h) {
		return protocol.Errorf(protocol.CodeInvalid, "the QP's memfd header cannot be read (%d bytes, %v)", n, err)
	}
	magic, version, rs := binary.LittleEndian.Uint32(h[0:]), binary.LittleEndian.Uint32(h[4:]), binary.LittleEndian.Uint32(h[protocol.VQPOffRingSize:])
	if magic != protocol.VQPMagic || version != protocol.VQPVersion || int64(rs) != ring {
		return protocol.Errorf(protocol.CodeInvalid,
			"the QP's memfd header says magic %#x version %d ring_size %d; want %#x (FFVQ), %d and %d (its size less the header page): write it as include/freeflow/verbs_layout.h says",
			magic, version, rs, uint32(protocol.VQPMagic), protocol.VQPVersion, ring)
	}
	return nil
}

// checkDoorbell checks a QP's doorbell as VERBS_QP_CREATE requires: an
// AF_UNIX datagram socket, which its peers ring with non-blocking sends.
func checkDoorbell(fd int) error {
	dom, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err1 != nil || err2 != nil || dom != unix.AF_UNIX || typ != unix.SOCK_DGRAM {
		return protocol.Errorf(protocol.CodeInvalid,
			"the QP's second descriptor is not an AF_UNIX datagram socket (domain %d type %d, %v %v); send the doorbell socketpair(AF_UNIX, SOCK_DGRAM) made, or no second descriptor (docs/VERBS.md, \"Completion events\")",
			dom, typ, err1, err2)
	}
	return nil
}

// markQPDead sets the dead word of a QP's memfd (or a UD lane's), so that
// its peers' next work request on it fails (docs/VERBS.md, "Queue pair
// memory").
func markQPDead(fd int) error {
	return withQPHeaderWord(fd, protocol.VQPOffDead, func(w *uint32) { atomic.StoreUint32(w, protocol.VQPDeadGone) })
}

// markQPReset sets the dead word of the memfd a QP had before its reset to
// say so (VERBS_QP_RESET): its peer's next work request on it fails as to
// a NIC's QP in RESET, and its receives stay (docs/VERBS.md).
func markQPReset(fd int) error {
	return withQPHeaderWord(fd, protocol.VQPOffDead, func(w *uint32) { atomic.StoreUint32(w, protocol.VQPDeadReset) })
}

// addLanesWord adds 1 to the lanes word of a UD QP's memfd: its owner asks
// for its lanes when that word changes (PROTOCOL.md, "UD lanes").
func addLanesWord(fd int) error {
	return withQPHeaderWord(fd, protocol.VQPOffLanes, func(w *uint32) { atomic.AddUint32(w, 1) })
}

// withQPHeaderWord calls f with the u32 word at off of a QP memfd's header
// page, mapped writable for the call. The agent maps the page only for
// that, a mapping per word written: QPs are many, and written rarely.
func withQPHeaderWord(fd int, off int, f func(*uint32)) error {
	mem, err := unix.Mmap(fd, 0, protocol.VQPHeaderSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the QP's header page: %w", err)
	}
	f((*uint32)(unsafe.Pointer(&mem[off])))
	return unix.Munmap(mem)
}

// dupFD returns a copy of fd the agent keeps, or hands over and closes.
func dupFD(fd int) (int, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, protocol.Errorf(protocol.CodeInternal, "the agent could not copy a descriptor (%v); it may be out of file descriptors", err)
	}
	return nfd, nil
}

// reopenReadOnly opens the file behind fd anew, read-only: a descriptor
// that cannot be mapped writable, whatever fd allows.
func reopenReadOnly(fd int) (int, error) {
	nfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, protocol.Errorf(protocol.CodeInternal, "the agent could not reopen a region's memfd read-only (%v)", err)
	}
	return nfd, nil
}
