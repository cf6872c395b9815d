from gpu_platform.cli.app import main

main()
