package protocol

// A verbs queue pair's memfd (docs/VERBS.md, "Queue pair memory"). The
// owning provider writes its header; the agent checks it when the QP is
// registered and sets the dead word when the owner is gone.
const (
	VQPMagic       = 0x51564646 // the bytes 46 46 56 51, "FFVQ"
	VQPVersion     = 1
	VQPHeaderSize  = 4096     // the header page; the ring follows
	VQPRingMin     = 4096     // smallest ring_size
	VQPRingMax     = 16 << 20 // largest ring_size
	VQPOffRingSize = 8        // u32 ring_size, after magic and version
	VQPOffDead     = 16       // u32: 1 once the owner is gone
)
