/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory channel's layout (docs/SHM.md, "Layout"): the memfd's
 * header the agent writes, the words both libraries of a channel share, and
 * the bytes of its bell socket. Little-endian. The layout lines of
 * docs/protocol-vectors.txt hold these values; the C and Go vector tests
 * check them, and the library's tests use these names, not numbers.
 *
 * How long a library keeps drained pages (FF_SHM_IDLE_MS and its kin in
 * src/shm/shm.h) is its own policy, not layout: the peer and the agent do not
 * depend on it.
 */
#ifndef FREEFLOW_SHM_LAYOUT_H
#define FREEFLOW_SHM_LAYOUT_H

/* The header: magic, version, ring_size, all u32. */
#define FF_SHM_MAGIC		0x4d534646u	/* the bytes "FFSM" */
#define FF_SHM_VERSION		2u
#define FF_SHM_HDR_SIZE		4096u	/* header and control blocks; the rings follow */
#define FF_SHM_RING_MIN		4096u
#define FF_SHM_RING_MAX		(16u << 20)
#define FF_SHM_OFF_SWITCH_BY	64u
#define FF_SHM_OFF_OFFER	128u	/* a link's offer word (link.c), own line */
#define FF_SHM_OFF_OFFER_WAIT	192u	/* nonzero: its connector may sleep on the bell */
#define FF_SHM_OFF_DONE		256u	/* u32 per role (connector, acceptor): let go for good */
#define FF_SHM_OFF_RESUME	320u	/* a socket pair coming back onto this channel (docs/SHM.md) */
#define FF_SHM_OFF_CTL0		1024u	/* ring 0's control block (the connector produces) */
#define FF_SHM_OFF_CTL1		1536u
/* Control block field offsets. */
#define FF_SHM_CTL_HEAD		0u
#define FF_SHM_CTL_BASE		8u	/* u64: the stream index at data offset 0 (producer) */
#define FF_SHM_CTL_TAIL		64u
#define FF_SHM_CTL_CONS_WAIT	128u
#define FF_SHM_CTL_PROD_WAIT	192u
#define FF_SHM_CTL_CONS_BUSY	256u
#define FF_SHM_CTL_PROD_SHUT	320u
#define FF_SHM_CTL_CONS_CLOSED	384u
#define FF_SHM_CTL_SPILL	448u	/* u32: who may touch data past FF_SHM_KEEP (FF_SPILL_*) */
/* Data pages of a ring past this offset are given back once the ring drains and stays idle (docs/SHM.md). */
#define FF_SHM_KEEP		(256u << 10)
/* What a channel with rings of ring bytes holds once drained: its ledger entry's bytes. */
#define FF_SHM_RESIDENT(ring)	(FF_SHM_HDR_SIZE + 2 * ((ring) < FF_SHM_KEEP ? (ring) : FF_SHM_KEEP))

/* Bell socket bytes. */
#define FF_SHM_BELL		'D'
#define FF_SHM_SWITCH		'S'

/* Roles: which ring is tx. The connector produces into ring 0. */
enum ff_shm_role { FF_SHM_CONNECTOR = 1, FF_SHM_ACCEPTOR = 2 };
/* switch_by: parked on TCP for a migration, each end on its own socket (docs/SHM.md, "Parking"). */
#define FF_SHM_PARKED		3u

/* Bits of the resume word: each end holds it quiet, then one decides (docs/SHM.md, "Back to shared memory"). */
#define FF_RESUME_HELD_CONNECTOR	1u
#define FF_RESUME_HELD_ACCEPTOR		2u
#define FF_RESUME_GO			4u
#define FF_RESUME_OFF			8u
/* After GO: the end's channel is in place (and armed for its program's pollers); nobody writes before both. */
#define FF_RESUME_DONE_CONNECTOR	16u
#define FF_RESUME_DONE_ACCEPTOR		32u
/* Once both hold it: the end's own queues are empty (nothing more can come into them). */
#define FF_RESUME_QUIET_CONNECTOR	64u
#define FF_RESUME_QUIET_ACCEPTOR	128u

/* The done word of role. */
#define FF_SHM_OFF_DONE_OF(role)	(FF_SHM_OFF_DONE + 4u * ((role) - 1u))

/* Values of the offer word (docs/SHM.md, "Layout"; link.c). */
enum ff_shm_offer {
	FF_OFFER_NONE = 0,	/* made by the agent: no offer */
	FF_OFFER_OFFERED,	/* made by a connector, sent over a link */
	FF_OFFER_TAKEN,		/* acceptor: both ends on shm */
	FF_OFFER_WITHDRAWN,	/* connector: both ends ask the agent */
};

/* Values of a ring's spill word (docs/SHM.md, "Giving memory back"). */
enum ff_shm_spill {
	FF_SPILL_NONE = 0,	/* nothing past FF_SHM_KEEP was written since it was given back */
	FF_SPILL_USED,		/* producer: it wrote past FF_SHM_KEEP; not now */
	FF_SPILL_WRITING,	/* producer: it is writing past FF_SHM_KEEP */
	FF_SPILL_FREEING,	/* consumer: the ring is empty and it gives those pages back */
};

#endif
