# The fake CUPTI and the host program that stand in for a CUDA application
# in the tests of libflamewatch-cuda.so (no GPU in CI).
FAKES := $(BUILD)/fakes

$(FAKES)/libcupti.so: tests/fakes/fake_cupti.c tests/fakes/fake_cupti.h | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
		-std=gnu11 -fPIC -shared -isystem $(CUDA_INC) -o $@ $< -lpthread

$(FAKES)/cuda_host: tests/fakes/cuda_host.c tests/fakes/fake_cupti.h | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -Wall -Wextra -Werror -std=gnu11 -o $@ $< -ldl

fakes: $(FAKES)/libcupti.so $(FAKES)/cuda_host $(CUDA_LIB)
