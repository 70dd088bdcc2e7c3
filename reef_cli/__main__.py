from reef_cli.cli.entry import main

main()
