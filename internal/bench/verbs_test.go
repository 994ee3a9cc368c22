package bench

import (
	"math"
	"testing"
)

// Shortened from real runs of perftest 4.5 between two FreeFlow containers.
const perftestLat = `
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       1000          0.15           62.01        0.22     	       0.29        	0.95   		0.40    		13.83  
 64      1000          0.16           10.01        0.23     	       0.25        	0.10   		0.41    		2.10   
---------------------------------------------------------------------------------------
`

const perftestBW = `
 local address: LID 0x10c QPN 0x000c PSN 0xe89872 RKey 0x823f1c4b VAddr 0x007f31b3c70000
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 64         5000             877.97             657.32 		   10.769565
 65536      5000             39842.97            38140.84		   0.610253
---------------------------------------------------------------------------------------
`

func TestParsePerftest(t *testing.T) {
	lat, err := ParsePerftest(perftestLat)
	if err != nil || len(lat) != 2 || lat["2 B"][mP50] != 0.22 || lat["2 B"][mP99] != 0.40 || lat["64 B"][mP50] != 0.23 {
		t.Fatalf("latency table: %v %v", lat, err)
	}
	bw, err := ParsePerftest(perftestBW)
	if err != nil || len(bw) != 2 || math.Abs(bw["64 KiB"][mGbps]-305.13) > 0.01 || bw["64 B"][mMpps] != 10.769565 {
		t.Fatalf("bandwidth table: %v %v", bw, err)
	}
	if _, err := ParsePerftest("Did not detect devices\nUnable to find the Infiniband/RoCE device\n"); err == nil {
		t.Fatal("an output without a table parsed")
	}
}
