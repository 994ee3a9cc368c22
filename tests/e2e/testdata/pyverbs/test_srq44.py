# SPDX-License-Identifier: MIT
# rdma-core 56.1's test_srq.py (copied beside the suite from the source
# scripts/install-deps.sh fetched) under the suite of rdma-core 44 that
# Debian's python3-pyverbs ships, which has no SRQ tests: 44's RDMATestCase
# lacks the create_players 56.1's tests call, so it is given one, as 44's
# test_odp.py defines it for itself. TestVerbsRdmaCoreTestSuite runs this.
import errno
import unittest

from pyverbs.pyverbs_error import PyverbsRDMAError
from tests import test_srq
from tests.test_srq import SrqTestCase  # noqa: F401 (the tests unittest finds here)


def create_players(self, resource, **resource_arg):
    try:
        self.client = resource(**self.dev_info, **resource_arg)
        self.server = resource(**self.dev_info, **resource_arg)
    except PyverbsRDMAError as ex:
        if ex.error_code == errno.EOPNOTSUPP:
            raise unittest.SkipTest(f'Create player of {resource.__name__} is not supported')
        raise ex
    self.client.pre_run(self.server.psns, self.server.qps_num)
    self.server.pre_run(self.client.psns, self.client.qps_num)
    self.traffic_args = {'client': self.client, 'server': self.server,
                         'iters': self.iters, 'gid_idx': self.gid_index,
                         'port': self.ib_port}


if not hasattr(test_srq.SrqTestCase, 'create_players'):
    test_srq.SrqTestCase.create_players = create_players
