module example.com/pgoutput-consumer-test

go 1.19
