// A function whose init fails: its module throws while loading.
throw Object.assign(new Error('BROKER_CONNECTIONS is missing'), { name: 'ConfigurationError' });
