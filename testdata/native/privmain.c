/* privmain: calls priv_outer of privlib.c's shared library. */
void priv_outer(void);

int main(void) {
	priv_outer();
	return 0;
}
