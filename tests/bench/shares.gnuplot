# Draws the compute shares' timeline written by tests/bench/compute_bench.py (timeline section):
#   gnuplot -e "csv='build/bench/shares.csv'; png='build/bench/shares.png'" tests/bench/shares.gnuplot
# scripts/bench.sh runs it; docs/shares.png is a copy of its figure.
if (!exists("csv")) csv = 'build/bench/shares.csv'
if (!exists("png")) png = 'build/bench/shares.png'

set terminal pngcairo size 1100,520 font "sans,11" noenhanced
set output png
set datafile separator ","
set datafile columnheaders

set title "libslice compute shares on the simulated GPU: A (share 30) and B (share 70), C (share 30) from 6 s to 12 s"
set xlabel "time (s)"
set ylabel "share of the device (%)"
set xrange [0:16]
set yrange [0:105]
set ytics 10
set grid ytics lc rgb "#dddddd"
set key outside right top vertical spacing 1.15 width -2

set style line 1 lc rgb "#1f77b4" lw 2.5
set style line 2 lc rgb "#d62728" lw 2.5
set style line 3 lc rgb "#2ca02c" lw 2.5
set style line 11 lc rgb "#a6c8e6" lw 1
set style line 12 lc rgb "#f0a8a8" lw 1
set style line 13 lc rgb "#a8dca8" lw 1
# Targets: wide pale bands behind the measured lines.
set style line 21 lc rgb "#c6dbef" lw 8
set style line 22 lc rgb "#f7c4c4" lw 8
set style line 23 lc rgb "#c7e9c0" lw 8
set style line 30 lc rgb "#666666" lw 1.5

p(c) = 100 * column(c)
# C's lines only while C is there (its target is not 0).
pc(c) = column("C_target") > 0 ? 100 * column(c) : NaN

plot csv using "t_s":(p("A_target")) with steps ls 21 title "A target", \
     csv using "t_s":(p("B_target")) with steps ls 22 title "B target", \
     csv using "t_s":(pc("C_target")) with steps ls 23 title "C target", \
     csv using "t_s":(p("A_100ms")) with lines ls 11 title "A, last 100 ms", \
     csv using "t_s":(p("B_100ms")) with lines ls 12 title "B, last 100 ms", \
     csv using "t_s":(pc("C_100ms")) with lines ls 13 title "C, last 100 ms", \
     csv using "t_s":(p("A_500ms")) with lines ls 1 title "A, last 500 ms", \
     csv using "t_s":(p("B_500ms")) with lines ls 2 title "B, last 500 ms", \
     csv using "t_s":(pc("C_500ms")) with lines ls 3 title "C, last 500 ms", \
     csv using "t_s":(p("device_500ms")) with lines ls 30 title "device busy, last 500 ms"
