from benchmarks.peers.run import main

main()
