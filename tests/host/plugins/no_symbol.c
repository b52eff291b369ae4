/* A shared object that is no attncheck plugin: it does not export
 * attncheck_plugin_impls. */
int attncheck_not_a_plugin(void);
int attncheck_not_a_plugin(void) { return 0; }
