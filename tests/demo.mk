demo: $(LIB)
	BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) CC=$(CC) examples/run-demo.sh
