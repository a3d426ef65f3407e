from readergroup.cli import main

main()
