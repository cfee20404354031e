# examples/: training programs on real data (issue 4).
