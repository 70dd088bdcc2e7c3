from reef_cli.cli.main import main

main()
