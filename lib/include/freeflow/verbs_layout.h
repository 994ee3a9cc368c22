/* SPDX-License-Identifier: MIT */
/*
 * A verbs queue pair's memfd (docs/VERBS.md, "Queue pair memory"): its
 * header, which the owning provider writes and the agent checks, the dead
 * word the agent sets when the owner is gone, and the incoming ring the
 * connected peer produces into. Little-endian. The verbs-qp-layout line of
 * docs/protocol-vectors.txt holds these values; the C and Go vector tests
 * check them.
 */
#ifndef FREEFLOW_VERBS_LAYOUT_H
#define FREEFLOW_VERBS_LAYOUT_H

/* The header: magic, version, ring_size (u32 each). */
#define FF_VQP_MAGIC		0x51564646u	/* the bytes "FFVQ" */
#define FF_VQP_VERSION		2u
#define FF_VQP_HDR_SIZE		4096u	/* header page; the ring follows */
#define FF_VQP_RING_MIN		4096u
#define FF_VQP_RING_MAX		(16u << 20)
#define FF_VQP_OFF_RING_SIZE	8u
/*
 * u32: 0 while the owner reads the ring; FF_VQP_DEAD_GONE once it destroyed
 * the QP or is gone; FF_VQP_DEAD_RESET once it took the QP back to RESET,
 * which gave it a new memfd (VERBS_QP_RESET): nothing produced here is read
 * any more. The agent writes both (the owner the first too, at destroy).
 */
#define FF_VQP_OFF_DEAD		16u
#define FF_VQP_DEAD_GONE	1u
#define FF_VQP_DEAD_RESET	2u
/* u32: the QP's qp_access_flags (IBV_ACCESS_REMOTE_*), which one-sided requests through it need. */
#define FF_VQP_OFF_ACCESS	20u
/*
 * u32, in a UD QP's own memfd: the agent adds 1 each time it gives the QP
 * a new lane (VERBS_UD_LANE), so the owner asks for lanes only then.
 */
#define FF_VQP_OFF_LANES	24u
/*
 * u32, the owner's: it adds 1 at each ibv_dereg_mr of a region that
 * allowed remote access, so its peers ask the agent again for the regions
 * they hold through this QP (a revoked rkey then fails, as on a NIC).
 */
#define FF_VQP_OFF_MR_GEN	28u
/* u64 byte counters of the ring, each on its own cache line: the peer produces, the owner consumes. */
#define FF_VQP_OFF_PROD		64u
#define FF_VQP_OFF_CONS		128u
/*
 * u32 wake-up requests (docs/VERBS.md, "Completion events"). waiting, the
 * peer's, on the prod line its reader looks at with it: it has sends
 * waiting for room, ring its doorbell after consuming. armed, the owner's:
 * its receive CQ is armed, ring its doorbell after producing; on a line of
 * its own, which a polling owner never writes, so the producer's look at
 * it after each message misses no cache (the cons line moves at each).
 */
#define FF_VQP_OFF_WAITING	72u
#define FF_VQP_OFF_ARMED	192u
/*
 * The owner's, on the cons line: u64, receives ever posted to the QP's own
 * queue (all ones for a QP on an SRQ), and u32, its min_rnr_timer (the IB
 * code): a peer whose rnr_retry is below 7 starts a message only once a
 * receive is there for it, and retries for as long as a NIC would.
 */
#define FF_VQP_OFF_RQ_POSTED	144u
#define FF_VQP_OFF_RNR_TIMER	152u

/* A record in the ring: a 16-byte header, then len payload bytes, padded to FF_VQP_REC_ALIGN. */
#define FF_VQP_REC_HDR		16u
#define FF_VQP_REC_ALIGN	16u
#define FF_VQP_REC_LEN		0u	/* u32: payload bytes in this record */
#define FF_VQP_REC_OP		4u	/* u8: enum ff_vqp_op */
#define FF_VQP_REC_FLAGS	5u	/* u8: FF_VQP_FIRST, FF_VQP_LAST */
#define FF_VQP_REC_IMM		8u	/* u32: immediate data, as the sender gave it */
#define FF_VQP_REC_TOTAL	12u	/* u32: the whole message's bytes (on its first record) */

enum ff_vqp_op {
	FF_VQP_OP_SEND = 1,		/* payload: a piece of a SEND */
	FF_VQP_OP_SEND_IMM = 2,		/* ... with immediate data */
	FF_VQP_OP_WRITE_IMM = 3,	/* no payload: an RDMA WRITE of total bytes, done, with immediate */
	FF_VQP_OP_PAD = 15,		/* no message: skip to the ring's end */
};

#define FF_VQP_FIRST	1u
#define FF_VQP_LAST	2u
#define FF_VQP_SOLICITED 4u	/* on a message's last piece: sent with IBV_SEND_SOLICITED */
/*
 * In a UD lane: the datagram's address handle had a GRH (is_global), so
 * the receive gets one. A lane's records are whole datagrams (FIRST|LAST)
 * whose total word is the Q_Key they were sent with.
 */
#define FF_VQP_GRH	8u

/*
 * Across hosts (docs/VERBS.md, "Across hosts"): the two providers of an RC
 * pair exchange frames over one TCP connection, each a 40-byte header and
 * len payload bytes. Little-endian.
 *
 * A SEND goes in frames of at most FF_VW_PIECE bytes, each one record in
 * the receiver's ring (FF_VW_RING bytes). The sender keeps the receiver's
 * producer count as the receiver will (the same records and pads, in the
 * same order: SENDs' pieces, and an empty record per WRITE with
 * immediate) and starts a frame only once the consumer count the receiver
 * last told (CREDIT) leaves room for its record: so a receiver never stops
 * reading the connection for want of room, and the answers behind a SEND
 * pass it, as on a NIC's link.
 */
#define FF_VW_RING		(1u << 20)
#define FF_VW_PIECE		(FF_VW_RING / 8)
#define FF_VW_HDR		40u
#define FF_VW_OP		0u	/* u8: enum ff_vw_op */
#define FF_VW_FLAGS		1u	/* u8: a SEND's FF_VQP_FIRST, FF_VQP_LAST, FF_VQP_SOLICITED (on its last) */
#define FF_VW_LEN		4u	/* u32: payload bytes that follow (SEND: this piece; WRITE; READ_RESP) */
#define FF_VW_IMM		8u	/* u32: immediate data */
#define FF_VW_RKEY		12u	/* u32: the target region's rkey (WRITE, READ, atomics) */
#define FF_VW_RADDR		16u	/* u64: the target address (WRITE, READ, atomics) */
#define FF_VW_ARG1		24u	/* u64: SEND: the message's bytes; READ: its length; CAS: compare; FADD: add;
					   ATOMIC_RESP: the old value; NAK: the status; CREDIT: the consumer count */
#define FF_VW_ARG2		32u	/* u64: CAS: swap; NAK: the op it answers */

enum ff_vw_op {
	FF_VW_SEND = 1,
	FF_VW_SEND_IMM = 2,
	FF_VW_WRITE = 3,
	FF_VW_WRITE_IMM = 4,
	FF_VW_READ = 5,
	FF_VW_CAS = 6,
	FF_VW_FADD = 7,
	FF_VW_READ_RESP = 8,	/* the answer to a READ, in order: its bytes */
	FF_VW_ATOMIC_RESP = 9,	/* the answer to an atomic, in order: the old value */
	FF_VW_NAK = 10,		/* a request the target refused (ibv_wc_status), in order */
	FF_VW_CREDIT = 11,	/* the receiver's ring consumed so far (bytes): room for more SENDs */
};

#endif
