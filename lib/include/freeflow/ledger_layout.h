/* SPDX-License-Identifier: MIT */
/*
 * The ledger's layout (docs/PROTOCOL.md, "The ledger"), in host byte
 * order: what ledger.c writes and what the agent reads. The test vectors
 * (ledger lines of docs/protocol-vectors.txt, and the ledger-layout line
 * for these values) check it, in C and in Go (internal/agent/ledger.go).
 */
#ifndef FREEFLOW_LEDGER_LAYOUT_H
#define FREEFLOW_LEDGER_LAYOUT_H

#define FF_LEDGER_MAGIC		"FFLG"
#define FF_LEDGER_VERSION	3u
#define FF_LEDGER_HDR		64u
#define FF_LEDGER_ENTRY		128u
#define FF_LEDGER_SLOTS_MAX	65536u
/* header */
#define FF_LEDGER_OFF_VERSION	4u	/* u32 */
#define FF_LEDGER_OFF_SLOTS	8u	/* u32 */
#define FF_LEDGER_OFF_ENTRY	12u	/* u32: FF_LEDGER_ENTRY */
#define FF_LEDGER_OFF_OPENED	16u	/* u64: linked shm connections ever opened */
#define FF_LEDGER_OFF_OPENED_TCP 24u	/* u64: linked host-tcp connections ever opened */
#define FF_LEDGER_OFF_NO_LIBRARY 32u	/* u64: connections ever accepted from peers without the library */
#define FF_LEDGER_OFF_USED	40u	/* u32: entries handed out so far (only grows): every live one is below */
#define FF_LEDGER_OFF_USED_KEPT	44u	/* u32: 1, the library keeps used (0 there: none yet); 0: a library from before the count */
/* entry */
#define FF_LEDGER_E_SEQ		0u	/* u32: odd while live */
#define FF_LEDGER_E_BYTES	4u	/* u32: the shm memory held */
#define FF_LEDGER_E_LOCAL_LEN	8u	/* u8: 6 or 18 */
#define FF_LEDGER_E_REMOTE_LEN	9u	/* u8: 6 or 18 */
#define FF_LEDGER_E_PATH	10u	/* u8: a PATH_KIND */
#define FF_LEDGER_E_REASON_LEN	11u	/* u8: 0 to FF_LEDGER_REASON_MAX */
#define FF_LEDGER_E_LOCAL	12u	/* an endpoint attribute's value, 18 bytes of room */
#define FF_LEDGER_E_REMOTE	30u	/* likewise */
#define FF_LEDGER_E_REASON	48u	/* the agent's REASON */
#define FF_LEDGER_REASON_MAX	64u
#define FF_LEDGER_E_FD		112u	/* i32: the fd the connection is at */
#define FF_LEDGER_E_INO		120u	/* u64: the inode of the socket there */

#endif
